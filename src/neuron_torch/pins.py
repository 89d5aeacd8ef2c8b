"""Whether a version satisfies a pin, compared as PEP 440 versions (with `packaging`), never as strings.

A pin is the version part of `name==pin`: an exact version (`2.28.7631.0`, `2.13.0+cpu`) or a prefix
(`2.13.3.0.*`). As pip does, an exact pin without a local label accepts any label (`2.28.7631.0` accepts AWS's
`2.28.7631.0+f702b353`); a pin with a label wants that label. Pre-releases are compared like any version: a pin is
not a resolver's preference, it is the check of what was locked or installed.

smoke_tests/neuron_smoke/pins.py is a copy without `packaging` (verify-device and the image's pin assertion run where
`packaging` may be absent); tests/test_pins.py proves both agree on a table of cases.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


def satisfies(name: str, pin: str, version: str) -> str | None:
    """None when `version` satisfies `name==pin`; otherwise the problem, naming the package, the pin and the version."""
    try:
        specifier = SpecifierSet(f"=={pin}")
    except InvalidSpecifier:
        return f"{name}: the pin {name}=={pin} is not a PEP 440 version or prefix (X.Y.Z, X.Y.Z+label or X.Y.*)"
    try:
        found = Version(version)
    except InvalidVersion:
        return f"{name} {version} is not a PEP 440 version, so it cannot satisfy the pin {name}=={pin}"
    if specifier.contains(found, prereleases=True):
        return None
    return f"{name} {version} does not satisfy the pin {name}=={pin}"
