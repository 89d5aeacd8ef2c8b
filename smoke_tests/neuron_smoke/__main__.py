import os
import sys
import warnings

from neuron_smoke import EXIT_USAGE

# torch warns on import when numpy is absent; nothing here uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

try:
    import torch  # noqa: F401  (the harness needs it everywhere; say so plainly when it is missing)
except ImportError as exc:
    print(
        f"verify-device: error: {sys.executable} cannot import torch ({exc}). Run it with the Python of the "
        "environment that holds torch: NEURON_TORCH_PYTHON=/path/to/venv/bin/python verify-device ...",
        file=sys.stderr,
    )
    sys.exit(EXIT_USAGE)

from neuron_smoke.cli import main  # noqa: E402  (after the filter, which must precede importing torch)

code = main()
# Everything is written and closed by now. Tearing down an interpreter that has loaded torch._dynamo takes most of a
# second (module and C++ static teardown) and does nothing this command needs, so leave without it.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
