#!/usr/bin/env bash
# The hermetic test bed: scripts/testbed.sh [build|serve|stop|status] [--bases all|none|debian12,...]
# Builds (or reuses, by content) a signed apt repository, PEP 503 indexes, Debian base images and the test cells'
# locks under .testbed/, and serves them on http://127.0.0.1:38023. See docs/mirrors.md.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-}
if [[ -z "$python" ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
exec "$python" -m tests.testbed "$@"
