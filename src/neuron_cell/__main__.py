"""`python -m neuron_cell [--expect DIGEST] [--root DIR]`: print this folder's digest (or DIR's: a bundle checks its
copy of the smoke tests this way), or exit 1 when it is not DIGEST (a copy that lost, gained or changed a file)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuron_cell import HOME, digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuron_cell", description=__doc__)
    parser.add_argument("--expect", metavar="DIGEST", help="the toolkit's digest of neuron_cell (sha256, hex)")
    parser.add_argument(
        "--root", metavar="DIR", type=Path, default=HOME, help="the folder to digest (default: this one)"
    )
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"python -m neuron_cell: --root {args.root} is not a folder", file=sys.stderr)
        return 2
    found = digest(args.root)
    if args.expect is None:
        print(found)
        return 0
    if found != args.expect:
        print(
            f"{args.root} has digest {found}, not the toolkit's {args.expect[:200]}: copy the folder whole "
            "from the same neuron-torch checkout",
            file=sys.stderr,
        )
        return 1
    print(f"{args.root}: digest {found} as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
