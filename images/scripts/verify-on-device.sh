#!/bin/sh
# verify-device on the build instance when it has a Neuron device (instance_type trn2/trn3); skipped otherwise.
# Runs as the build's login user. verify-device runs under sudo with the venv's Python named: sudo resets the
# environment, and without NEURON_TORCH_PYTHON verify-device would fall back to the system python3, which has no torch.
# INSTANCE_TYPE: the build instance's type, for the message when there is no device.
set -eu
if ! ls /dev/neuron* >/dev/null 2>&1; then
    echo "verify-device: skipped, no Neuron device on this ${INSTANCE_TYPE:-} build instance"
    exit 0
fi
sudo NEURON_TORCH_PYTHON=/opt/neuron-torch/venv/bin/python \
    PATH=/opt/aws/neuron/bin:/opt/neuron-torch/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/opt/aws/neuron/lib \
    /usr/local/bin/verify-device --device neuron
