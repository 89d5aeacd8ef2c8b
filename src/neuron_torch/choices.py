"""The names the CLI offers (choices, environment variables), apart from the modules that act on them: parsing the
command line (and `--help`, `--version`) imports none of those."""

from __future__ import annotations

RESOLVERS = ("uv", "pip-tools")  # neuron_torch.lock: the resolvers `neuron-torch lock --resolver` runs
PACKER_SOURCES = {"docker": "docker.local", "amazon-ebs": "amazon-ebs.ubuntu"}  # neuron_torch.packer: --only NAME
MIRROR_ENV_VAR = "NEURON_TORCH_MIRROR"  # neuron_torch.mirror: the mirror settings file when --mirror is not given
