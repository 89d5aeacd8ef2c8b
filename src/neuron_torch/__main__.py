"""`python -m neuron_torch`: the `neuron-torch` command."""

import sys

from neuron_torch.cli import main

sys.exit(main())
