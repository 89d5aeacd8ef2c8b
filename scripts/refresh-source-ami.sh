#!/usr/bin/env bash
# Prints the newest Canonical Ubuntu server AMI name for an os of the matrix, to pin as os.<id>.source_ami_name:
#   scripts/refresh-source-ami.sh ubuntu26.04 [--region us-east-1]
# Then edit constraints/matrix.toml, run `neuron-torch render` and commit the matrix and images/cells/*.
set -euo pipefail
cd "$(dirname "$0")/.."
os_id=${1:?usage: scripts/refresh-source-ami.sh OS_ID [--region REGION]}
region=${AWS_REGION:-us-east-1}
if [[ "${2:-}" == "--region" ]]; then region=${3:?--region needs a value}; fi
python=.venv/bin/python
[[ -x "$python" ]] || python=python3
read -r current owner codename version < <("$python" - "$os_id" <<'PY'
import sys
from neuron_torch.matrix import load_matrix
system = load_matrix().operating_system(sys.argv[1])
print(system.source_ami_name or "-", system.source_ami_owner or "099720109477", system.codename, system.version)
PY
)
pattern="ubuntu/images/hvm-ssd-gp3/ubuntu-${codename}-${version}-amd64-server-*"
newest=$(aws ec2 describe-images --region "$region" --owners "$owner" \
    --filters "Name=name,Values=$pattern" "Name=architecture,Values=x86_64" "Name=state,Values=available" \
    --query 'sort_by(Images, &CreationDate)[-1].[Name,ImageId,CreationDate]' --output text)
if [[ -z "$newest" || "$newest" == "None" ]]; then
    echo "no image matches $pattern (owner $owner, $region)" >&2
    exit 1
fi
read -r name image_id created <<<"$newest"
echo "current: $current"
echo "newest:  $name ($image_id in $region, created $created)"
echo
echo "Put this in constraints/matrix.toml under [os.\"$os_id\"], then run: neuron-torch render"
echo "source_ami_name = \"$name\""
