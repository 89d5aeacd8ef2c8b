import os
import sys
import warnings

# torch warns on import when numpy is absent; nothing here uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from neuron_smoke.cli import main  # noqa: E402  (after the filter, which must precede importing torch)

code = main()
# Everything is written and closed by now. Tearing down an interpreter that has loaded torch._dynamo takes most of a
# second (module and C++ static teardown) and does nothing this command needs, so leave without it.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
