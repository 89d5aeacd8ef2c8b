"""Unit tests of neuron_cell: tests/unit/neuron_cell/test_MODULE.py for each of its modules."""
