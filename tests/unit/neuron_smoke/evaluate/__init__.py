"""Unit tests of neuron_smoke/evaluate: tests/unit/neuron_smoke/evaluate/test_MODULE.py for each of its modules."""
