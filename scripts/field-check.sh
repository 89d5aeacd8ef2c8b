#!/usr/bin/env bash
# field-check.sh: what no twin can prove, checked where the real world is reachable (AWS, the real Neuron, PyTorch
# and PyPI indexes, a Trn2 with the Neuron driver). Steps: lock every cell of the release against the real indexes,
# build the default cell's image, run verify-device in it with every /dev/neuron* passed through; then write one
# JSON report with every step's result, its log and the exact versions resolved (from the locks).
#
# Usage: scripts/field-check.sh [--dry-run] [--report FILE] [--cell ID] [--mirror FILE]
#   --dry-run   the same steps against the hermetic test bed (constraints/test-matrix.toml, served by
#               scripts/testbed.sh build) and verify-device on the CPU instead of a Trn2: what CI runs.
#   --report    where the JSON report goes (default: field-check-report.json in the current folder)
#   --cell      the cell whose image is built and run (default: the release's default cell)
#   --mirror    mirror settings (docs/mirrors.md) for the lock and the build
# Exit codes: 0 every step passed, 1 a step failed (the report says which), 2 usage error.
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/.." || exit 2
# in_caller PATH: a relative path as the caller meant it, from the folder it ran the script in (not the checkout).
in_caller() { if [[ $1 == /* ]]; then printf '%s' "$1"; else printf '%s/%s' "$caller" "$1"; fi; }

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
# A usage error (exit 2, as the usage says) when the option in $1 has no value, or an empty one, in $2.
need_value() {
  if [[ -z ${2:-} ]]; then
    echo "field-check: $1 needs a value; run scripts/field-check.sh --help" >&2
    exit 2
  fi
}
dry_run=0
report=$(in_caller field-check-report.json)
cell=""
mirror=()
while (($#)); do
  case $1 in
    --dry-run) dry_run=1 ;;
    --report) need_value "$@"; report=$(in_caller "$2"); shift ;;
    --cell) need_value "$@"; cell=$2; shift ;;
    --mirror)
      need_value "$@"
      mirror=(--mirror "$(in_caller "$2")")
      if [[ ! -f ${mirror[1]} ]]; then
        echo "field-check: --mirror $2: no such file; name your mirror settings (docs/mirrors.md)" >&2
        exit 2
      fi
      shift
      ;;
    -h | --help) usage; exit 0 ;;
    *) echo "field-check: unknown option '$1'; run scripts/field-check.sh --help" >&2; exit 2 ;;
  esac
  shift
done

# The report's folder must take a new file before any step runs (a folder named as the report is refused by name).
report_dir=$(dirname -- "$report")
if [[ -d $report ]]; then
  echo "field-check: --report $report is a folder; name the report file, e.g. $report/field-check-report.json" >&2
  exit 2
fi
if ! probe=$(mktemp -p "$report_dir" .field-check-probe.XXXXXX 2>/dev/null); then
  echo "field-check: --report $report: cannot write in $report_dir (missing, a file, or read-only); name another file" >&2
  exit 2
fi
rm -f -- "$probe"

neuron_torch=.venv/bin/neuron-torch   # the checkout's own, or $NEURON_TORCH: a path from the caller's folder or on PATH
if [[ -n ${NEURON_TORCH:-} ]]; then
  neuron_torch=$NEURON_TORCH
  [[ $neuron_torch != */* ]] || neuron_torch=$(in_caller "$neuron_torch")
fi
if ! neuron_torch=$(command -v "$neuron_torch"); then
  echo "field-check: ${NEURON_TORCH:-.venv/bin/neuron-torch} not found; run scripts/dev-setup.sh (or set NEURON_TORCH)" >&2
  exit 2
fi
matrix=constraints/matrix.toml
docker_args=()   # the devices passed through
verify_args=()   # verify-device's options
if ((dry_run)); then
  matrix=constraints/test-matrix.toml
  verify_args=(--device cpu)
fi
nt=("$neuron_torch" --matrix "$matrix")
if [[ -z $cell ]]; then
  cell=$("${neuron_torch%/*}/python" -c 'import sys; from neuron_torch.matrix import load_matrix
print(load_matrix(sys.argv[1]).release.default_cell)' "$matrix" 2>/dev/null) || {
    echo "field-check: cannot read the default cell of $matrix" >&2
    exit 2
  }
fi
"${nt[@]}" cell "$cell" >/dev/null || exit 2
if ((!dry_run)); then
  devices=(/dev/neuron*)
  if [[ ! -e ${devices[0]} ]]; then
    echo "field-check: no /dev/neuron* here: run it on a Trn2 with the Neuron driver (or use --dry-run)" >&2
    exit 2
  fi
  for device in "${devices[@]}"; do docker_args+=("--device=$device"); done
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -m 0777 "$work/out"   # the image runs as neuron (uid 1000) and writes verify-device's report here
steps="$work/steps.tsv"
: >"$steps"
failed=0
step() { # step NAME COMMAND...: run it, log it, record name, exit code, seconds
  local name=$1 start code
  shift
  start=$(date +%s)
  echo "field-check: $name: $*"
  "$@" >"$work/$name.log" 2>&1
  code=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$code" "$(($(date +%s) - start))" "$*" >>"$steps"
  if ((code != 0)); then
    failed=1
    echo "field-check: $name failed (exit $code); last lines:" >&2
    tail -n 20 "$work/$name.log" >&2
  fi
  return "$code"
}

tag="neuron-torch:$cell"
step lock "${nt[@]}" lock --all "${mirror[@]}"
step build-image "${nt[@]}" build image --cell "$cell" --network host "${mirror[@]}" &&
  step verify-device /usr/bin/docker run --rm "${docker_args[@]}" -v "$work/out:/report" \
    "$tag" "${verify_args[@]}" --report /report/verify-device.json
"${neuron_torch%/*}/python" - "$steps" "$work" "$report" "$matrix" "$cell" "$dry_run" <<'PY'
import json, sys
from pathlib import Path
steps_file, work, report, matrix, cell, dry_run = sys.argv[1:]
work = Path(work)
from neuron_torch.lockfile import read_lock
from neuron_torch.matrix import load_matrix
versions = {}
for c in load_matrix(matrix).cells:
    lock = c.lock_path
    pins = {}
    if lock.is_file():
        pins = {p.name: p.version for p in read_lock(lock).packages}
    versions[c.id] = pins
steps = []
for line in Path(steps_file).read_text().splitlines():
    name, code, seconds, command = line.split("\t")
    log = (work / f"{name}.log").read_text(errors="replace")
    steps.append({"step": name, "passed": code == "0", "exit": int(code), "seconds": int(seconds),
                  "command": command, "log_tail": log.splitlines()[-40:]})
verify = work / "out" / "verify-device.json"
result = {"mode": "dry-run (test bed, CPU)" if dry_run == "1" else "field (real indexes, Trn2)",
          "matrix": matrix, "cell": cell, "steps": steps, "versions": versions,
          "verify_device": json.loads(verify.read_text()) if verify.is_file() else None}
result["passed"] = bool(steps) and all(s["passed"] for s in steps) and len(steps) == 3
try:
    Path(report).write_text(json.dumps(result, indent=2) + "\n")
except OSError as error:
    sys.exit(f"field-check: cannot write the report {report}: {error.strerror}")
print(f"field-check: {'passed' if result['passed'] else 'FAILED'}; report {report}")
PY
if ((failed)) || [[ $(wc -l <"$steps") -ne 3 ]]; then exit 1; fi
