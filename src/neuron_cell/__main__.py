"""`python -m neuron_cell [--expect DIGEST]`: print this folder's digest, or exit 1 when it is not DIGEST (a copy
that lost, gained or changed a file)."""

from __future__ import annotations

import argparse
import sys

from neuron_cell import HOME, digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuron_cell", description=__doc__)
    parser.add_argument("--expect", metavar="DIGEST", help="the toolkit's digest of neuron_cell (sha256, hex)")
    args = parser.parse_args(argv)
    found = digest()
    if args.expect is None:
        print(found)
        return 0
    if found != args.expect:
        print(
            f"neuron_cell at {HOME} has digest {found}, not the toolkit's {args.expect[:200]}: copy the folder whole "
            "from the same neuron-torch checkout",
            file=sys.stderr,
        )
        return 1
    print(f"neuron_cell at {HOME}: digest {found} as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
