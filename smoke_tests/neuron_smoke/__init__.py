"""Device smoke tests for TorchNeuron environments: one harness, one table entry per backend."""

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_DEVICE_MISSING = 3

__all__ = ["EXIT_CHECK_FAILED", "EXIT_DEVICE_MISSING", "EXIT_OK", "EXIT_USAGE"]
