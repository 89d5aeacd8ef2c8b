"""Which index serves which file: the PEP 503 pages of an index, read to confirm that each locked hash is a file of
the index the release routes its package to.

This is what makes a lock with `--extra-index-url` lines safe for plain pip: pip may look at every listed index, but
with `--require-hashes` it installs only a file whose sha256 is in the lock, and sealing checks here that every such
file is one the package's own index serves (so a same-version upload to another index cannot match).
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from neuron_torch.errors import EXIT_FAILED, NeuronTorchError
from neuron_torch.matrix import Index, canonical_name

_SHA256 = re.compile(r"#sha256=([0-9a-f]{64})")


def project_url(index_url: str, name: str) -> str:
    """The PEP 503 page of a project; a file:// index (a local folder) keeps its page as index.html."""
    base = index_url.rstrip("/") + "/" + canonical_name(name) + "/"
    return base + "index.html" if urlsplit(index_url).scheme == "file" else base


class IndexReader:
    """Reads project pages (through the environment's proxy, trusting the system CAs plus an extra CA bundle)."""

    def __init__(self, ca_bundle: Path | None = None) -> None:
        context = ssl.create_default_context()
        if ca_bundle is not None:
            context.load_verify_locations(cafile=str(ca_bundle))
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        self.pages: dict[str, set[str]] = {}

    def hashes(self, index: Index, name: str) -> set[str]:
        """The sha256 digests of every file the index lists for the project (empty when it lists none)."""
        url = project_url(index.url, name)
        if url not in self.pages:
            try:
                with self.opener.open(url, timeout=120) as response:
                    page = response.read().decode("utf-8", "replace")
            except OSError as error:
                # A page the index does not have: HTTP's 404, or a file:// index's missing file (urllib wraps that
                # FileNotFoundError in a URLError, whose reason is it).
                if getattr(error, "code", None) == 404 or isinstance(
                    getattr(error, "reason", error), FileNotFoundError
                ):
                    page = ""
                else:
                    raise NeuronTorchError(
                        f"cannot read {url} to check where the locked files come from: {error}. Check that the "
                        "index is reachable (behind a TLS-intercepting proxy pass --ca-bundle).",
                        EXIT_FAILED,
                    ) from None
            self.pages[url] = set(_SHA256.findall(page))
        return self.pages[url]
