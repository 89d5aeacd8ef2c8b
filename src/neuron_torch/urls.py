"""URLs a user gives (--index NAME=URL, a mirror's indexes, apt repository and proxy): checked when read, so a typo
is named at once and not as a resolver's or curl's network error later."""

from __future__ import annotations

from urllib.parse import urlsplit

from neuron_cell.boundary import quote
from neuron_torch.errors import NeuronTorchError

INDEX_SCHEMES = ("http", "https", "file")
PROXY_SCHEMES = ("http", "https")


def check_url(value: str, where: str, schemes: tuple[str, ...] = INDEX_SCHEMES) -> str:
    """`value` when it is an absolute URL of one of `schemes` (with a host, except file:); a usage error otherwise."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises ValueError on a port that is not a number)
    except ValueError as error:
        raise NeuronTorchError(f"{where}: {quote(value)} is not a URL ({error})") from None
    hostless = parts.scheme != "file" and not parts.hostname
    if parts.scheme not in schemes or hostless or any(c.isspace() for c in value):
        example = "http://proxy.example:3128" if schemes == PROXY_SCHEMES else "https://mirror.example/simple"
        raise NeuronTorchError(
            f"{where}: {quote(value)} is not a URL of {', '.join(f'{s}:' for s in schemes)} (e.g. {example})"
        )
    return value
