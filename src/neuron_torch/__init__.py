"""neuron-torch: pinned, verified TorchNeuron environments for AWS Trainium2/3."""

__version__ = "0.1.0"
