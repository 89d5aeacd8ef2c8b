#!/usr/bin/env bash
# Image build benchmark (prints numbers; not a timed test): cold build, rebuild after a smoke-test edit, and the
# image's size against the installed size of what it locks.
#   scripts/bench-image.sh [--matrix constraints/test-matrix.toml] [--cell ID] [--network host]
# Defaults: the test bed's cell (scripts/testbed.sh build must have run). Goals: rebuild <= 10% of cold;
# (image - base image) <= 1.25 x (venv + Neuron apt packages).
set -euo pipefail
cd "$(dirname "$0")/.."

matrix=constraints/test-matrix.toml
cell=2.13-py3.11-debian12
network=host
while (($#)); do
  case "$1" in
    --matrix) matrix=$2; shift 2 ;;
    --cell) cell=$2; shift 2 ;;
    --network) network=$2; shift 2 ;;
    *) echo "bench-image: unknown option $1" >&2; exit 2 ;;
  esac
done
docker=/usr/bin/docker
neuron_torch=.venv/bin/neuron-torch
tag="neuron-torch:bench-$cell"
stamp=smoke_tests/neuron_smoke/.bench-image-stamp
trap 'rm -f "$stamp"' EXIT

build() {
  "$neuron_torch" --matrix "$matrix" build image --cell "$cell" --tag "$tag" --network "$network" "$@" >/tmp/bench-image.log 2>&1 \
    || { tail -n 40 /tmp/bench-image.log >&2; exit 1; }
}
seconds() {
  local start
  start=$(date +%s.%N)
  "$@"
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)"
}

cold=$(seconds build --no-cache)
date +%s%N >"$stamp"
rebuild=$(seconds build)

base=$("$docker" image inspect --format '{{index .Config.Labels "org.opencontainers.image.base.name"}}' "$tag")
image_bytes=$("$docker" image inspect --format '{{.Size}}' "$tag")
base_bytes=$("$docker" image inspect --format '{{.Size}}' "$base")
# What the lock and the apt pins install: the venv on disk plus dpkg's Installed-Size (KiB) of the Neuron packages.
# shellcheck disable=SC2016 # expanded inside the container
locked_bytes=$("$docker" run --rm --network none --entrypoint /bin/bash "$tag" -c \
  'venv=$(du -sb /opt/neuron-torch/venv | cut -f1)
   apt=$(dpkg-query -W -f="\${Installed-Size}\n" aws-neuronx-runtime-lib aws-neuronx-collectives aws-neuronx-tools \
         | awk "{s += \$1} END {print s * 1024}")
   echo $((venv + apt))')

python3 - "$cold" "$rebuild" "$image_bytes" "$base_bytes" "$locked_bytes" "$cell" <<'PY'
import sys
cold, rebuild = float(sys.argv[1]), float(sys.argv[2])
image, base, locked = (int(v) for v in sys.argv[3:6])
mb = lambda b: f"{b / 1e6:.0f} MB"
print(f"cell {sys.argv[6]}")
print(f"cold build (--no-cache):          {cold} s")
print(f"rebuild after a smoke-test edit:  {rebuild} s ({100 * rebuild / max(cold, 1):.0f}% of cold; goal <= 10%)")
print(f"image size:                       {mb(image)} (base image {mb(base)})")
print(f"installed size of locked packages:{mb(locked):>7} (venv + Neuron apt packages)")
print(f"(image - base) / locked:          {(image - base) / locked:.2f}x (goal <= 1.25x); image / locked {image / locked:.2f}x")
PY
