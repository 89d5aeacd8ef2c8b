"""Whether a version satisfies a pin, by PEP 440, without `packaging` (standard library only).

A copy of src/neuron_torch/pins.py (which uses `packaging`) for where `packaging` may be absent: verify-device's
environment stage and the image's pin assertion (images/docker/assert-pins.py loads this file). It implements what
pins use: `==X` (any local label accepted when X has none: `2.28.7631.0` accepts `2.28.7631.0+f702b353`),
`==X+label` (that label) and `==X.*` (a prefix of the release). tests/test_pins.py proves it agrees with the
`packaging` version on a table of cases; change both together.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_VERSION = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?P<pre>[-_.]?(?P<pre_l>alpha|beta|preview|pre|a|b|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?P<post>(?:-(?P<post_n1>[0-9]+))|(?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?))?
    (?P<dev>[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PREFIX = re.compile(r"^\s*v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)\.\*\s*$", re.IGNORECASE)
_PRE_LETTER = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}


class _Version(NamedTuple):
    epoch: int
    release: tuple[int, ...]
    pre: tuple[str, int] | None
    post: int | None
    dev: int | None
    local: tuple[int | str, ...] | None


def _parse(text: str) -> _Version | None:
    match = _VERSION.match(text)
    if match is None:
        return None
    pre = (_PRE_LETTER[match["pre_l"].lower()], int(match["pre_n"] or 0)) if match["pre"] else None
    post = int(match["post_n1"] or match["post_n2"] or 0) if match["post"] else None
    local = None
    if match["local"]:
        local = tuple(int(p) if p.isdigit() else p.lower() for p in re.split(r"[-_.]", match["local"]))
    return _Version(
        epoch=int(match["epoch"] or 0),
        release=tuple(int(part) for part in match["release"].split(".")),
        pre=pre,
        post=post,
        dev=int(match["dev_n"] or 0) if match["dev"] else None,
        local=local,
    )


def _padded(release: tuple[int, ...], length: int) -> tuple[int, ...]:
    return release + (0,) * (length - len(release))


def _matches(pin: str, found: _Version) -> bool | None:
    """Whether found satisfies ==pin; None when the pin is not a version or prefix."""
    prefix = _PREFIX.match(pin)
    if prefix:
        wanted = tuple(int(part) for part in prefix["release"].split("."))
        return int(prefix["epoch"] or 0) == found.epoch and _padded(found.release, len(wanted))[: len(wanted)] == wanted
    exact = _parse(pin)
    if exact is None:
        return None
    length = max(len(exact.release), len(found.release))
    same_public = (
        exact.epoch == found.epoch
        and _padded(exact.release, length) == _padded(found.release, length)
        and (exact.pre, exact.post, exact.dev) == (found.pre, found.post, found.dev)
    )
    return same_public and (exact.local is None or exact.local == found.local)


def satisfies(name: str, pin: str, version: str) -> str | None:
    """None when `version` satisfies `name==pin`; otherwise the problem, naming the package, the pin and the version."""
    if _PREFIX.match(pin) is None and _parse(pin) is None:
        return f"{name}: the pin {name}=={pin} is not a PEP 440 version or prefix (X.Y.Z, X.Y.Z+label or X.Y.*)"
    found = _parse(version)
    if found is None:
        return f"{name} {version} is not a PEP 440 version, so it cannot satisfy the pin {name}=={pin}"
    if _matches(pin, found):
        return None
    return f"{name} {version} does not satisfy the pin {name}=={pin}"
