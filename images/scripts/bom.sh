#!/bin/sh
# The build target's bill of materials, by the one generator the image build runs too (neuron_cell.sbom, installed
# at /opt/neuron-torch/lib by the provisioning), written into /etc/neuron-torch/bom and so into the AMI or image:
# version-info.json (the cell, the release, Python, every pinned version, the Neuron driver, runtime, collectives and
# tools, the kernel and its dkms modules), the CycloneDX SBOMs of the venv and of the apt packages, and SHA256SUMS.
# The cell record is read through neuron_cell's one checked loader: a record of another schema stops the build.
# Runs as root on the target (POSIX sh: the target may have no bash yet).
set -eu
PYTHONPATH=/opt/neuron-torch/lib /opt/neuron-torch/venv/bin/python -m neuron_cell.sbom --host --out /etc/neuron-torch/bom
