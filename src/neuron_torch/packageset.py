"""The package set of a built image, and the check that a rebuild of the same commit gives the same one.

An image's package set is what its SBOMs list (the venv's distributions and dpkg's installed packages, which the
image build writes from what is installed and tests/integration/test_bom.py checks against `pip list` and
`dpkg-query`): name -> version, per kind. `build image --compare IMAGE` reads IMAGE's before it builds (so IMAGE may
be the tag the build moves), then the new image's, and names every package that differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from neuron_torch.bom import BOM_DIR, read_file
from neuron_torch.errors import EXIT_FAILED, NeuronTorchError

KINDS = {"pip": "sbom-venv.cdx.json", "apt": "sbom-apt.cdx.json"}
PackageSet = dict[str, dict[str, str]]


def package_set(docker: str, image: str) -> PackageSet:
    """{"pip": {name: version}, "apt": {name: version}} as the image's SBOMs list them."""
    found: PackageSet = {}
    for kind, name in KINDS.items():
        try:
            components = json.loads(read_file(docker, image, f"{BOM_DIR}/{name}"))["components"]
            found[kind] = {component["name"]: component["version"] for component in components}
        except (ValueError, KeyError, TypeError):
            raise NeuronTorchError(f"{image}: {BOM_DIR}/{name} is no CycloneDX SBOM", EXIT_FAILED) from None
    return found


def differences(before: Mapping[str, Mapping[str, str]], after: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Each package that differs, by kind and name: another version, or only in one of the two."""
    found = []
    for kind in KINDS:
        old, new = before.get(kind, {}), after.get(kind, {})
        for name in sorted(set(old) | set(new)):
            if name not in new:
                found.append(f"{kind} {name} {old[name]}: gone")
            elif name not in old:
                found.append(f"{kind} {name} {new[name]}: new")
            elif old[name] != new[name]:
                found.append(f"{kind} {name}: {old[name]} -> {new[name]}")
    return found


def check_same(changed: list[str], after: PackageSet, reference: str, image: str) -> str:
    """The line that says the package sets are the same; refused (exit 1) when `changed` (differences) names any."""
    if changed:
        raise NeuronTorchError(
            f"{image} does not have the package set of {reference}: {len(changed)} difference(s), e.g. {changed[0]} "
            "(each listed above): the lock or the apt pins let a version move, or the image changed outside them",
            EXIT_FAILED,
        )
    return f"same package set as {reference}: {len(after['pip'])} pip and {len(after['apt'])} apt packages"
