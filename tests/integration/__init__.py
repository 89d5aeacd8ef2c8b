"""Integration tests: the builders, the test bed's hosts and images, the simulated device, the indexes."""
