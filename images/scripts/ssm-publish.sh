#!/bin/sh
# Packer post-processor (on the controller): point the AMI's SSM parameters at the AMI just made, in every region it
# was made or copied to. MANIFEST: Packer's manifest.json (its last run's artifact_id is "region:ami-id,..."),
# SSM_PARAMETERS: the parameter names, SSM_PUBLISH: true writes them (aws ssm put-parameter, data type
# aws:ec2:image, so SSM checks the value is an AMI), anything else prints what would be written.
set -eu
pairs=$(python3 - "$MANIFEST" <<'PY'
import json, sys
manifest = json.load(open(sys.argv[1], encoding="utf-8"))
build = next(b for b in reversed(manifest["builds"]) if b["packer_run_uuid"] == manifest["last_run_uuid"])
print("\n".join(pair.replace(":", " ", 1) for pair in build["artifact_id"].split(",")))
PY
)
echo "$pairs" | while read -r region ami; do
    for name in $SSM_PARAMETERS; do
        if [ "$SSM_PUBLISH" = true ]; then
            aws ssm put-parameter --region "$region" --name "$name" --value "$ami" --type String \
                --data-type aws:ec2:image --overwrite >/dev/null
            echo "ssm: $region $name = $ami"
        else
            echo "ssm: $region $name = $ami (not written: ssm_publish = false)"
        fi
    done
done
