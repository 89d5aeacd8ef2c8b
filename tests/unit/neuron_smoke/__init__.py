"""Unit tests of neuron_smoke: tests/unit/neuron_smoke/test_MODULE.py for each of its modules."""
