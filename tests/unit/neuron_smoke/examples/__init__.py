"""Unit tests of neuron_smoke/examples: tests/unit/neuron_smoke/examples/test_MODULE.py for each of its modules."""
