"""The default model for stages 4-6 and loading a user's model (`--model package.module:factory`).

CONTRACT (also in `--help`): the factory takes no arguments and returns `(model, inputs)`, `(model, inputs, loss_fn)`
or `(model, inputs, loss_fn, optimizer)`. `model` is a torch.nn.Module; `inputs` is a CPU tensor, a tuple or list of
positional arguments, or a dict of keyword arguments, whose leaves are tensors (nested tuples, lists and dicts
allowed); `loss_fn(output)` returns a scalar tensor. Without loss_fn (or with None) the loss is the mean square of
every floating-point tensor in the output (which may be a tensor, or a tuple, list or dict of them). `optimizer` is a
torch.optim.Optimizer over the model's parameters, the one `--steps N` trains with (evaluate/parity.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from neuron_smoke.errors import UsageError
from neuron_smoke.model_contract import CONTRACT

LossFn = Callable[[Any], torch.Tensor]


@dataclass
class ModelSpec:
    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    loss_fn: LossFn
    name: str
    # Extra runs under torch.autocast on the device, compared with the float32 CPU reference (the default model).
    autocast: tuple[torch.dtype, ...] = ()
    optimizer: torch.optim.Optimizer | None = None  # the factory's own, over `model`'s parameters (--steps)
    # The `--model` factory (None for the default model): the shape sweep calls one that takes a `shape` keyword.
    factory: Callable[..., Any] | None = None

    def inputs_on(self, device: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        def move(t: Any) -> Any:
            return t.to(device) if isinstance(t, torch.Tensor) else t

        return pytree.tree_map(move, self.args), pytree.tree_map(move, self.kwargs)

    def input_leaves(self) -> list[torch.Tensor]:
        """Every input tensor, positional first, in a fixed order (a fingerprint's and the shape sweep's view)."""
        return [t for t in pytree.tree_leaves((self.args, self.kwargs)) if isinstance(t, torch.Tensor)]


class TransformerBlock(nn.Module):
    """A small causal language model: token embedding, one pre-norm block with multi-head attention written out
    (bmm, scaled masked softmax, bmm) and a GELU MLP, residuals, a final layer norm and the vocabulary head."""

    def __init__(self, vocab: int = 256, width: int = 128, heads: int = 4, hidden: int = 512, seq: int = 32) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.norm_out = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.ones(seq, seq).triu(1).bool(), persistent=False)

    def attention(self, h: torch.Tensor) -> torch.Tensor:
        b, t, c = h.shape
        d = c // self.heads
        # Linear layers see 2-D input, so each runs as addmm, as most models' projections do.
        qkv = self.qkv(h.reshape(b * t, c)).reshape(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = (x.reshape(b * self.heads, t, d) for x in qkv)
        scores = torch.bmm(q, k.transpose(1, 2)) * d**-0.5
        weights = scores.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = torch.bmm(weights, v).reshape(b, self.heads, t, d).permute(0, 2, 1, 3).reshape(b * t, c)
        out: torch.Tensor = self.proj(y).reshape(b, t, c)
        return out

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, t = tokens.shape
        x = self.embed(tokens) + self.pos[:t]
        x = x + self.attention(self.norm1(x))
        flat = self.norm2(x).reshape(b * t, -1)
        x = x + self.down(nn.functional.gelu(self.up(flat))).reshape(x.shape)
        logits: torch.Tensor = self.head(self.norm_out(x).reshape(b * t, -1))
        return logits


def default_factory() -> tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]:
    """The default model as a `--model` factory (`neuron_smoke.models:default_factory`), seeded."""
    torch.manual_seed(0)
    model = TransformerBlock()
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 256, (4, 33), generator=gen)
    inputs, target = tokens[:, :-1].contiguous(), tokens[:, 1:].reshape(-1)

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.float(), target.to(logits.device))

    return model, (inputs,), loss_fn


def default_spec() -> ModelSpec:
    model, args, loss_fn = default_factory()
    return ModelSpec(model, args, {}, loss_fn, "TransformerBlock (default)", autocast=(torch.bfloat16,))


def mean_square_loss(output: Any) -> torch.Tensor:
    leaves = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise UsageError(f"the model's output has no floating-point tensor to build a loss from; {CONTRACT}")
    total = leaves[0].float().pow(2).mean()
    for t in leaves[1:]:
        total = total + t.float().pow(2).mean()
    return total


def load(spec: str | None) -> ModelSpec:
    if spec is None:
        return default_spec()
    factory = resolve_factory(spec)
    try:
        made = factory()
    except SystemExit as exc:
        raise UsageError(f"--model {spec}: the factory {exited(exc)}; a factory returns (model, inputs)") from None
    except Exception as exc:
        raise UsageError(f"--model {spec}: the factory raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(made, tuple) or len(made) not in (2, 3, 4):
        raise UsageError(f"--model {spec}: the factory returned {type(made).__name__}; {CONTRACT}")
    model, inputs = made[0], made[1]
    if not isinstance(model, nn.Module):
        raise UsageError(
            f"--model {spec}: the first item is a {type(model).__name__}, not a torch.nn.Module; {CONTRACT}"
        )
    args, kwargs = _split_inputs(spec, inputs)
    loss_fn = made[2] if len(made) >= 3 and made[2] is not None else mean_square_loss
    if not callable(loss_fn):
        raise UsageError(f"--model {spec}: loss_fn is a {type(loss_fn).__name__}, not callable; {CONTRACT}")
    optimizer = _optimizer(spec, model, made[3]) if len(made) == 4 else None
    made_spec = ModelSpec(model, args, kwargs, loss_fn, spec, optimizer=optimizer, factory=factory)
    _check_on_cpu(made_spec)
    return made_spec


def _optimizer(spec: str, model: nn.Module, optimizer: Any) -> torch.optim.Optimizer | None:
    """The factory's optimizer, when it is one over the model's own parameters (None: the default, SGD)."""
    if optimizer is None:
        return None
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise UsageError(f"--model {spec}: the optimizer is a {type(optimizer).__name__}; {CONTRACT}")
    own = {id(p) for p in model.parameters()}
    if any(id(p) not in own for group in optimizer.param_groups for p in group["params"]):
        raise UsageError(f"--model {spec}: the optimizer holds tensors that are not the model's parameters; {CONTRACT}")
    return optimizer


def _check_on_cpu(spec: ModelSpec) -> None:
    """One forward and loss on the CPU, so that a broken contract is a usage error before any stage runs. The model is
    left as the factory made it: buffers a forward updates (BatchNorm's running statistics, which differ with the
    CPU's kernels) are put back and the random state is not advanced, so what the evaluation fingerprints and every
    run starts from is the factory's model, before any forward."""
    buffers = [(b, b.detach().clone()) for b in spec.model.buffers()]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            loss = spec.loss_fn(spec.model(*spec.args, **spec.kwargs))
    except UsageError:
        raise
    except SystemExit as exc:
        raise UsageError(f"--model {spec.name}: the model or loss_fn {exited(exc)} on the CPU") from None
    except Exception as exc:
        raise UsageError(
            f"--model {spec.name}: the model or loss_fn fails on the CPU: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        raise UsageError(f"--model {spec.name}: loss_fn did not return a floating-point scalar tensor; {CONTRACT}")


def _split_inputs(spec: str, inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(inputs, torch.Tensor):
        args: tuple[Any, ...] = (inputs,)
        kwargs: dict[str, Any] = {}
    elif isinstance(inputs, (tuple, list)):
        args, kwargs = tuple(inputs), {}
    elif isinstance(inputs, dict) and all(isinstance(k, str) for k in inputs):
        args, kwargs = (), dict(inputs)
    else:
        raise UsageError(f"--model {spec}: inputs is a {type(inputs).__name__}; {CONTRACT}")
    leaves = pytree.tree_leaves((args, kwargs))
    bad = sorted({type(x).__name__ for x in leaves if not isinstance(x, torch.Tensor)})
    if not leaves or bad:
        what = f"non-tensor leaves ({', '.join(bad)})" if bad else "no tensor"
        raise UsageError(f"--model {spec}: inputs hold {what}; {CONTRACT}")
    on_device = sorted({str(x.device) for x in leaves if x.device.type != "cpu"})
    if on_device:
        raise UsageError(f"--model {spec}: inputs are on {', '.join(on_device)}, not the CPU; {CONTRACT}")
    return args, kwargs


def exited(exc: SystemExit) -> str:
    """What a user's code that called sys.exit did (verify-device would end with its code, silently, and no report)."""
    return f"exited (sys.exit({exc.code!r}))"


def resolve_factory(spec: str) -> Callable[[], Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--model {spec!r}: expected package.module:factory")
    if module_name.endswith(".py") or "/" in module_name or module_name.startswith("."):
        stem = module_name.rstrip("/").rsplit("/", 1)[-1].removesuffix(".py").lstrip(".") or "mymodel"
        raise UsageError(
            f"--model {spec}: {module_name} is a path, not a module: name its module, e.g. --model {stem}:{attr}, "
            "with the folder that holds it on PYTHONPATH"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        # the module itself not found (not a module it imports): where verify-device looks for it
        own = exc.name is not None and f"{module_name}.".startswith(f"{exc.name}.")
        hint = " (put the folder that holds it on PYTHONPATH)" if own else ""
        raise UsageError(f"--model {spec}: cannot import {module_name}: {exc}{hint}") from exc
    except SystemExit as exc:  # a script: its argument parsing or main run at import
        raise UsageError(
            f"--model {spec}: importing {module_name} {exited(exc)}; a module named by --model must not exit when "
            'imported: run a script\'s own argument parsing and main under `if __name__ == "__main__":`'
        ) from None
    except Exception as exc:  # the module's own code failed (a SyntaxError, an error raised at import)
        raise UsageError(f"--model {spec}: importing {module_name} raised {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"--model {spec}: {module_name} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]
