"""The one installation of a neuron-torch hash lock into a venv: standard library only, run with the cell's Python.

Used by all three builders, each with the neuron_cell folder (copied as a unit, its digest checked): the image's
venv stage, the python_env role and the offline bundle's install.sh. Online, each
index's entries are installed with `--index-url` of that index alone (as the lock recorded them; `--index NAME=URL`
points an index at a mirror); offline (`--find-links DIR`), every entry comes from DIR with `--no-index`. Always
`--require-hashes --no-deps`, pip's own config files and PIP_* index settings ignored, then `pip check`.

    python -m neuron_cell.lockinstall --venv DIR [--index NAME=URL ...] [--find-links DIR] [--retries N]
        [--timeout S] LOCK

Exit 2 on a usage error or a lock that cannot be routed (nothing installed), pip's status when pip fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from neuron_cell import locktext

# pip settings from the environment that would change where packages come from (the lock decides that), and the
# PYTHONPATH that put neuron_cell on this run's path (pip runs the venv's packages alone).
_ROUTING_ENV = (
    "PYTHONPATH",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_NO_INDEX",
    "PIP_REQUIRE_HASHES",
)


def plan(text: str, overrides: dict[str, str], find_links: str | None) -> list[tuple[list[str], str]]:
    """The pip runs that install the lock: [(pip options, requirements text)], one per index (one when offline)."""
    groups = locktext.groups(text, overrides)
    if find_links:
        requirements = "".join(group["requirements"] for group in groups)
        return [(["--no-index", "--find-links", find_links], requirements)]
    return [(["--index-url", group["url"]], group["requirements"]) for group in groups]


def _overrides(values: list[str]) -> dict[str, str]:
    found = {}
    for value in (word for given in values for word in given.split()):  # one --index may hold several, spaced
        name, sep, url = value.partition("=")
        if not sep or not name or not url:
            raise ValueError(f"--index {value!r} is not NAME=URL (e.g. --index pypi=https://mirror.example/simple/)")
        found[name] = url
    return found


def install(venv: Path, runs: list[tuple[list[str], str]], retries: int, timeout: int) -> int:
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in _ROUTING_ENV} | {"PIP_CONFIG_FILE": os.devnull}
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    common = ["--require-hashes", "--no-deps", "--retries", str(retries), "--timeout", str(timeout)]
    for options, requirements in runs:
        print(f"lockinstall: installing {requirements.count('==')} locked package(s) with {' '.join(options)}")
        result = subprocess.run(
            [*pip, "install", *common, *options, "-r", "/dev/stdin"], input=requirements, text=True, env=env
        )
        if result.returncode != 0:
            return result.returncode
    return subprocess.run([*pip, "check"], env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuron_cell.lockinstall", description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", type=Path, help="the cell's hash lock (neuron-torch lock)")
    parser.add_argument("--venv", type=Path, required=True, help="the venv to install into (it must exist)")
    parser.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="the URL of a lock index (a mirror); several may be given, spaced",
    )
    parser.add_argument("--find-links", help="offline: install every entry from this folder (--no-index)")
    parser.add_argument("--retries", type=int, default=5, help="pip --retries (default 5)")
    parser.add_argument("--timeout", type=int, default=60, help="pip --timeout in seconds (default 60)")
    args = parser.parse_args(argv)
    if not (args.venv / "bin" / "python").exists():
        parser.error(f"{args.venv} is not a venv (no bin/python): create it with `python3 -m venv {args.venv}`")
    try:
        runs = plan(args.lock.read_text(), _overrides(args.index), args.find_links)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    if not runs:
        parser.error(f"{args.lock} locks no package: regenerate it with `neuron-torch lock`")
    return install(args.venv, runs, args.retries, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
