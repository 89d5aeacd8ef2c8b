"""What a `--model` factory must return; torch-free, so that `--help` can state it without importing torch."""

CONTRACT = (
    "a factory takes no arguments and returns (model, inputs), (model, inputs, loss_fn) or (model, inputs, loss_fn, "
    "optimizer): model a torch.nn.Module, inputs a CPU tensor, a tuple/list of positional arguments or a dict of "
    "keyword arguments (tensor leaves, nesting allowed), loss_fn(output) a scalar tensor (None: the default loss), "
    "optimizer a torch.optim.Optimizer over the model's parameters (for --steps)"
)
