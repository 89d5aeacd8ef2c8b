"""What a `--model` factory must return; torch-free, so that `--help` can state it without importing torch."""

CONTRACT = (
    "a factory takes no arguments and returns (model, inputs) or (model, inputs, loss_fn): model a torch.nn.Module, "
    "inputs a CPU tensor, a tuple/list of positional arguments or a dict of keyword arguments (tensor leaves, "
    "nesting allowed), loss_fn(output) a scalar tensor"
)
