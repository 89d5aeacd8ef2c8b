"""Whether a version satisfies a pin, compared as PEP 440 versions, never as strings: the one version matching.

A pin is the version part of `name==pin`: an exact version (`2.28.7631.0`, `2.13.0+cpu`) or a release prefix
(`2.13.3.0.*`). As pip does, an exact pin without a local label accepts any label (`2.28.7631.0` accepts AWS's
`2.28.7631.0+f702b353`); a pin with a label wants that label. Pre-releases are compared like any version: a pin is
not a resolver's preference, it is the check of what was locked or installed.

Versions are parsed by `packaging` where it is installed and otherwise by the copy of its `version` module vendored
beside this file (vendor/packaging_version.py, packaging's licence beside it): the image's pin assertion and
verify-device run in venvs that hold only the lock. The matching below is the same code over either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

VERSION_SOURCE: str  # which parser this process uses: "packaging" or "vendored"
if TYPE_CHECKING:
    from packaging.version import InvalidVersion, Version
else:
    try:
        from packaging.version import InvalidVersion, Version

        VERSION_SOURCE = "packaging"
    except ImportError:  # the venv holds only the lock
        from neuron_cell.vendor.packaging_version import InvalidVersion, Version

        VERSION_SOURCE = "vendored"

__all__ = ["VERSION_SOURCE", "apt_matches", "matches", "satisfies"]


def _prefix(pin: str) -> Version | None:
    """The release of a prefix pin (`2.13.*`: epoch and release only, as PEP 440 allows); None otherwise."""
    if not pin.endswith(".*"):
        return None
    release = Version(pin[:-2])
    if (release.pre, release.post, release.dev, release.local) != (None, None, None, None):
        raise InvalidVersion(pin)
    return release


def matches(pin: str, version: str) -> bool:
    """Whether `version` satisfies `==pin`. Raises InvalidVersion when either is not a PEP 440 version (or prefix)."""
    prefix = _prefix(pin)
    found = Version(version)
    if prefix is not None:
        length = len(prefix.release)
        padded = found.release + (0,) * (length - len(found.release))
        return found.epoch == prefix.epoch and padded[:length] == prefix.release
    exact = Version(pin)
    return (found if exact.local is not None else Version(found.public)) == exact


def satisfies(name: str, pin: str, version: str) -> str | None:
    """None when `version` satisfies `name==pin`; otherwise the problem, naming the package, the pin and the version."""
    try:
        _prefix(pin) or Version(pin)
    except InvalidVersion:
        return f"{name}: the pin {name}=={pin} is not a PEP 440 version or prefix (X.Y.Z, X.Y.Z+label or X.Y.*)"
    try:
        if matches(pin, version):
            return None
    except InvalidVersion:
        return f"{name} {version} is not a PEP 440 version, so it cannot satisfy the pin {name}=={pin}"
    return f"{name} {version} does not satisfy the pin {name}=={pin}"


def apt_matches(pin: str, version: str) -> bool:
    """Whether a Debian package `version` satisfies the apt pin `NAME=pin*` the release writes (apt's glob on the
    version string: the version itself or one that extends it, as `2.31.7.0*` takes `2.31.7.0-1`)."""
    return version.startswith(pin)
