import os
import sys
import warnings

# torch warns on import when numpy is absent; nothing here uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from neuron_smoke.cli import main  # noqa: E402  (after the filter, which must precede importing torch)

code = main()
# Everything is written and closed by now. Leave without interpreter teardown: after a timeout a hung stage's thread
# may never return, and otherwise, with torch._dynamo loaded, teardown takes most of a second and does nothing this
# command needs.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
