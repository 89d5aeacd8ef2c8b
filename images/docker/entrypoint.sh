#!/usr/bin/env bash
# The image's entrypoint: `docker run IMAGE [--device cpu ...]` runs verify-device with those options (default
# device: neuron, which needs `--device=/dev/neuron0` on the docker command line and the driver on the host);
# `docker run IMAGE COMMAND ...` (python, bash, ...) runs that command instead.
set -euo pipefail

if [[ $# -eq 0 || "$1" == -* ]]; then
  exec verify-device "$@"
fi
exec "$@"
