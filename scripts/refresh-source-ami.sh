#!/usr/bin/env bash
# Prints the newest Canonical Ubuntu server AMI name for an os of the matrix, to pin as os.<id>.source_ami_name:
#   scripts/refresh-source-ami.sh ubuntu26.04 [--region us-east-1]
# Then edit constraints/matrix.toml, run `neuron-torch render` and commit the matrix and images/cells/*.
# Needs the AWS CLI with credentials that may call ec2:DescribeImages. Exit 2: a usage error (nothing is asked of AWS).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/refresh-source-ami.sh OS_ID [--region REGION] (REGION default: \$AWS_REGION, else us-east-1)"
fail_usage() {
    echo "refresh-source-ami: $1; $usage" >&2
    exit 2
}
os_id=""
region=${AWS_REGION:-us-east-1}
while (($#)); do
    case $1 in
        -h | --help) echo "$usage"; exit 0 ;;
        --region)
            [[ -n ${2:-} ]] || fail_usage "--region needs a value"
            region=$2
            shift 2
            ;;
        -*) fail_usage "unknown option '$1'" ;;
        *)
            [[ -z $os_id ]] || fail_usage "one OS_ID only, not '$os_id' and '$1'"
            os_id=$1
            shift
            ;;
    esac
done
[[ -n $os_id ]] || fail_usage "no OS_ID given (an os of constraints/matrix.toml, e.g. ubuntu24.04)"
command -v aws >/dev/null || fail_usage "the AWS CLI (aws) is not on PATH; install it and configure credentials"
python=.venv/bin/python
[[ -x "$python" ]] || python=python3
# The matrix's answer, or its own message (an os the release does not have) and exit 2: never a traceback.
info=$(PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" "$python" - "$os_id" <<'PY'
import sys
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import load_matrix
try:
    system = load_matrix().operating_system(sys.argv[1])
except NeuronTorchError as exc:
    print(f"refresh-source-ami: {exc}", file=sys.stderr)
    sys.exit(2)
print(system.source_ami_name or "-", system.source_ami_owner or "099720109477", system.codename, system.version)
PY
)
read -r current owner codename version <<<"$info"
pattern="ubuntu/images/hvm-ssd-gp3/ubuntu-${codename}-${version}-amd64-server-*"
newest=$(aws ec2 describe-images --region "$region" --owners "$owner" \
    --filters "Name=name,Values=$pattern" "Name=architecture,Values=x86_64" "Name=state,Values=available" \
    --query 'sort_by(Images, &CreationDate)[-1].[Name,ImageId,CreationDate]' --output text)
if [[ -z "$newest" || "$newest" == "None" ]]; then
    echo "refresh-source-ami: no image matches $pattern (owner $owner, $region)" >&2
    exit 1
fi
read -r name image_id created <<<"$newest"
echo "current: $current"
echo "newest:  $name ($image_id in $region, created $created)"
echo
echo "Put this in constraints/matrix.toml under [os.\"$os_id\"], then run: neuron-torch render"
echo "source_ami_name = \"$name\""
