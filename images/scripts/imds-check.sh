#!/bin/sh
# Fails unless the instance enforces IMDSv2: a metadata request without a session token must be refused (401).
set -eu
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 http://169.254.169.254/latest/meta-data/ || true)
if [ "$code" != 401 ]; then
    echo "imds-check: a token-less metadata request got HTTP '$code', not 401: IMDSv2 is not enforced." >&2
    echo "imds-check: build AMIs with Packer >= 1.7 and the amazon plugin (images/README.md: packer init)." >&2
    exit 1
fi
echo "imds-check: IMDSv2 enforced (token-less request refused with 401)"
