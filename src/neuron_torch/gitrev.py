"""The commit an artifact names: the immutable image tag and an AMI's `git-sha` tag (12 hex digits, an edited
checkout refused unless allowed) and the image's `org.opencontainers.image.revision` label (the full sha)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from neuron_torch.errors import NeuronTorchError

REVISION_DIGITS = 12


def git_revision(root: Path, allow_dirty: bool, digits: int = REVISION_DIGITS) -> str:
    """The checkout's commit (`digits` hex digits, 40 for the full sha), `-dirty` appended only when allowed and
    edited."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)

    head = git("rev-parse", f"--short={digits}", "HEAD")
    if head.returncode != 0:
        raise NeuronTorchError(
            f"{root} is not a git checkout with a commit: an immutable tag names the commit an image was built from; "
            "publish from the neuron-torch checkout (--project DIR)"
        )
    edited = [line for line in git("status", "--porcelain", "--untracked-files=no").stdout.splitlines() if line]
    if edited and not allow_dirty:
        raise NeuronTorchError(
            f"{root} has {len(edited)} uncommitted change(s) (e.g. {edited[0][3:]}): an immutable tag names a commit; "
            "commit or stash them and rebuild, or pass --allow-dirty to tag <sha>-dirty"
        )
    return head.stdout.strip() + ("-dirty" if edited else "")


def build_revision(root: Path) -> str:
    """The commit an image is built from, for its `org.opencontainers.image.revision` label: the full sha, with
    `-dirty` when the checkout is edited; empty outside a git checkout (an exported tree still builds)."""
    try:
        return git_revision(root, allow_dirty=True, digits=40)
    except NeuronTorchError:
        return ""
