"""verify-device's entry: `python -m neuron_smoke` (scripts/verify-device.sh) and the `verify-device` console script
that `pip install` of the toolkit makes (`neuron_smoke.__main__:console`) both run `console`."""

import os
import sys
import warnings
from typing import NoReturn


def console() -> NoReturn:
    # torch warns on import when numpy is absent; nothing here uses numpy. The filter must precede importing torch.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    from neuron_smoke.cli import main

    code = main()
    # Everything is written and closed by now. Leave without interpreter teardown: after a timeout a hung stage's
    # thread may never return, and otherwise, with torch._dynamo loaded, teardown takes most of a second and does
    # nothing this command needs.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console()
