"""What a `--model` factory must return; torch-free, so that `--help` can state it without importing torch."""

CONTRACT = (
    "a factory takes no arguments and returns (model, inputs), (model, inputs, loss_fn) or (model, inputs, loss_fn, "
    "optimizer): model a torch.nn.Module, inputs a CPU tensor, a tuple/list of positional arguments or a dict of "
    "keyword arguments (tensor leaves, nesting allowed), loss_fn(output) a scalar tensor (None: the default loss), "
    "optimizer a torch.optim.Optimizer over the model's parameters (for --steps)"
)

# The shape sweep's rule (--shapes), also in `--help`.
SHAPES = (
    "--shapes resizes the first input tensor to each shape and every other input tensor's dimensions of the sizes "
    "it changes (a mask, labels) alike; a factory with a `shape` keyword (default None) is instead called as "
    "factory(shape=S) for each shape S, and its inputs and loss_fn are swept (its model is not used)"
)
