"""Unit tests of neuron_torch: tests/unit/neuron_torch/test_MODULE.py for each of its modules."""
