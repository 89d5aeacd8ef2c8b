import sys
import warnings

# torch warns on import when numpy is absent; nothing here uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from neuron_smoke.cli import main  # noqa: E402  (after the filter, which must precede importing torch)

sys.exit(main())
