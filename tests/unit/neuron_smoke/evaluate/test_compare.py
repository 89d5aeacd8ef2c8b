"""neuron_smoke.evaluate.compare: per-tensor errors against the baseline and the CPU run (and which side caused
them), what is missing where, the worst error per layer, and the layers where an error starts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_smoke.evaluate import compare, tensors
from neuron_smoke.evaluate.baseline import Baseline
from neuron_smoke.evaluate.capture import Capture
from neuron_smoke.numerics import normwise_error

RTOL = 1e-3
REF = torch.tensor([1.0, 2.0, -4.0])


def _cap(device: str, values: dict[str, torch.Tensor], layers: dict[str, str] | None = None) -> Capture:
    return Capture(device=device, tensors=values, layer_of=layers or {})


def _baseline(full: dict[str, torch.Tensor], sketched: dict[str, torch.Tensor] | None = None) -> Baseline:
    entries: dict[str, Any] = {n: {"shape": list(t.shape), "stored": "full"} for n, t in full.items()}
    values = dict(full)
    for n, t in (sketched or {}).items():
        entries[n] = {"shape": list(t.shape), "stored": "sketch"}
        values[f"sketch:{n}"] = tensors.sketch(t)
    return Baseline(path=Path("b"), index={"tensors": entries}, values=values)


def _off(t: torch.Tensor, rel: float) -> torch.Tensor:
    """t with its first element moved by rel x max|t|: a normwise error of rel."""
    out = t.clone()
    out[0] += rel * float(t.abs().max())
    return out


def test_each_tensor_is_compared_with_both_references_and_the_cause_is_named() -> None:
    device = _cap("neuron", {"same": REF, "dev": _off(REF, 0.01), "env": REF, "ids": torch.arange(3)}, {"same": "fc"})
    cpu = _cap("cpu", {"same": REF, "dev": REF, "env": REF})
    base = _baseline({"same": REF, "dev": REF, "env": _off(REF, 0.5)})
    rows = {r["tensor"]: r for r in compare.per_tensor(device, cpu, base, RTOL)}
    assert list(rows) == ["same", "dev", "env"]  # the integer tensor is not compared
    same, dev, env = rows["same"], rows["dev"], rows["env"]
    assert (same["vs_cpu"], same["vs_baseline"], same["cpu_vs_baseline"]) == (0.0, 0.0, 0.0)
    assert (same["ok"], same["source"], same["layer"], same["shape"]) == (True, "-", "fc", [3])
    assert dev["vs_cpu"] == normwise_error(device.tensors["dev"], REF) > RTOL and dev["cpu_vs_baseline"] == 0.0
    assert (dev["ok"], dev["source"]) == (False, "device")
    # the device agrees with its own CPU; both differ from the old environment's run
    assert env["vs_cpu"] == 0.0 and env["vs_baseline"] == env["cpu_vs_baseline"] == normwise_error(
        REF, base.full("env")
    )
    assert (env["ok"], env["source"]) == (False, "environment")


def test_a_value_kept_under_several_names_is_measured_once_per_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[tuple[int, int]] = []

    def counting(value: torch.Tensor, reference: torch.Tensor, floor: float = 0.0) -> float:
        measured.append((id(value), id(reference)))
        return normwise_error(value, reference, floor)

    monkeypatch.setattr(compare, "normwise_error", counting)
    out, ref, base = _off(REF, 0.01), REF.clone(), REF.clone()
    device = _cap("neuron", {"act/a/out/0": out, "act/b/in/0": out, "grad/w": _off(REF, 0.2)})
    cpu = _cap("cpu", {"act/a/out/0": ref, "act/b/in/0": ref, "grad/w": REF})
    rows = compare.per_tensor(device, cpu, _baseline({"act/a/out/0": base, "act/b/in/0": base, "grad/w": REF}), RTOL)
    assert rows[0] | {"tensor": "act/b/in/0"} == rows[1] and rows[0]["vs_cpu"] == normwise_error(out, ref) > RTOL
    # out vs CPU and baseline, CPU vs baseline; grad/w against REF (its CPU run and its baseline both), REF vs REF
    assert len(measured) == len(set(measured)) == 5
    other = _cap("cpu", {"act/a/out/0": ref, "act/b/in/0": ref.clone(), "grad/w": REF})  # equal, not the same object
    measured.clear()
    compare.per_tensor(device, other, None, RTOL)
    assert len(measured) == 3


def test_on_the_cpu_the_device_run_is_the_cpu_run_and_its_baseline_errors_are_the_cpus() -> None:
    device = _cap("cpu", {"same": REF, "env": _off(REF, 0.5)})
    base = _baseline({"same": REF, "env": REF})
    rows = {r["tensor"]: r for r in compare.per_tensor(device, device, base, RTOL)}
    env = rows["env"]
    assert env["vs_cpu"] == 0.0 and env["vs_baseline"] == env["cpu_vs_baseline"] == normwise_error(_off(REF, 0.5), REF)
    assert (env["ok"], env["source"], rows["same"]["ok"]) == (False, "environment", True)


def test_without_a_baseline_or_a_cpu_value_only_the_other_reference_counts() -> None:
    device = _cap("neuron", {"a": _off(REF, 0.5), "b": REF})
    rows = compare.per_tensor(device, _cap("cpu", {"b": REF}), None, RTOL)
    assert [(r["vs_cpu"], r["vs_baseline"], r["ok"], r["source"]) for r in rows] == [
        (None, None, True, "-"),  # nothing to compare with: not a failure
        (0.0, None, True, "-"),
    ]
    base = _baseline({"b": REF})
    [a, b] = compare.per_tensor(device, _cap("cpu", {}), base, RTOL)
    assert a["vs_baseline"] is None and b["vs_baseline"] == 0.0 and b["cpu_vs_baseline"] is None


def test_a_sketched_baseline_tensor_is_compared_through_its_sketch_and_a_shape_change_is_infinite() -> None:
    big = torch.randn(40, 30, generator=torch.Generator().manual_seed(0))
    base = _baseline({}, {"w": big, "v": big})
    device = _cap("cpu", {"w": _off(big, 0.2), "v": big.reshape(30, 40)})
    rows = {r["tensor"]: r for r in compare.per_tensor(device, device, base, RTOL)}
    assert rows["w"]["vs_baseline"] == normwise_error(tensors.sketch(device.tensors["w"]), tensors.sketch(big)) > 0
    assert rows["v"]["vs_baseline"] == math.inf  # the same elements in another shape are not the same tensor
    assert rows["w"]["source"] == rows["v"]["source"] == "environment"


def test_missing_lists_what_one_run_has_and_another_lacks() -> None:
    device = _cap("neuron", {"a": REF, "new": REF})
    cpu = _cap("cpu", {"a": REF, "cpu_only": REF})
    assert compare.missing(device, cpu, None) == {"only_in_cpu_run": ["cpu_only"]}
    assert compare.missing(device, cpu, _baseline({"a": REF, "gone": REF})) == {
        "only_in_cpu_run": ["cpu_only"],
        "only_in_baseline": ["gone"],
        "only_in_device_run": ["new"],
    }


def _row(tensor: str, layer: str | None, cpu: float | None, base: float | None = None) -> dict[str, Any]:
    return {"tensor": tensor, "layer": layer, "vs_cpu": cpu, "vs_baseline": base}


def test_per_layer_keeps_the_worst_error_of_each_kind_in_forward_order() -> None:
    rows = [
        _row("act/head/in/0", "head", 0.1),
        _row("act/head/out/0", "head", 0.3, 0.2),
        _row("act/head#2/out/0", "head", 0.5),
        _row("grad/head.weight", "head", 0.05),
        _row("actgrad/head/in/0", "head", 0.07),  # what head's backward passes on: a gradient of head's
        _row("actgrad/head/out/0", "head", 0.09),  # the gradient reaching it: kept apart
        _row("act/fc/out/0", "fc", 0.0),
        _row("weight/extra.w", "extra", 0.01),
        _row("loss", None, 9.0),  # no layer: not in any
    ]
    layers = compare.per_layer(rows, ["fc", "head", "head#2"])
    assert [e["layer"] for e in layers] == ["fc", "head", "extra"]  # not in the forward order: last
    head = layers[1]
    assert head["tensors"] == 6 and head["input_vs_cpu"] == 0.1 and head["output_vs_cpu"] == 0.5
    assert head["grad_vs_cpu"] == 0.07 and head["grad_at_output_vs_cpu"] == 0.09 and head["output_vs_baseline"] == 0.2
    assert head["worst_vs_cpu"] == 0.5 and head["worst_vs_baseline"] == 0.2
    assert "worst_vs_baseline" not in layers[0] and layers[2]["weight_vs_cpu"] == 0.01


def test_an_origin_needs_agreeing_inputs_and_an_output_error_amplified_past_rtol() -> None:
    rows = [
        _row("act/a/in/0", "a", 0.0),
        _row("act/a/out/0", "a", 0.0, 0.5),  # starts the error against the baseline only
        _row("act/b/in/0", "b", RTOL / 2),
        _row("act/b/out/0", "b", RTOL * 2),  # over rtol, but under AMPLIFY x its input's error: inherited
        _row("act/c/in/0", "c", 1e-5),
        _row("act/c/out/0", "c", 0.2),
        _row("act/c#2/in/0", "c", 0.0),
        _row("act/c#2/out/0", "c", 0.3),
    ]
    order = ["a", "b", "c", "c#2"]
    cpu = compare.origins(rows, order, "cpu", RTOL)
    assert [(o["call"], o["layer"]) for o in cpu] == [("c", "c"), ("c#2", "c")]
    assert (cpu[0]["input_error"], cpu[0]["output_error"]) == (1e-5, 0.2)
    assert [o["call"] for o in compare.origins(rows, order, "baseline", RTOL)] == ["a"]
    assert compare.origins(rows, order, "cpu", 1.0) == []


def test_a_numerically_zero_tensor_is_measured_against_the_scale_of_its_kind() -> None:
    """A bias gradient a BatchNorm cancels is rounding noise (1e-9 beside gradients of 1): its noise is no error;
    a 1 % error in a gradient of ordinary size still is."""
    noise = torch.tensor([1e-9, -2e-9, 5e-10])
    device = _cap("neuron", {"grad/b": noise * 1.5, "grad/w": _off(REF, 0.01), "weight/w": REF})
    cpu = _cap("cpu", {"grad/b": noise, "grad/w": REF, "weight/w": REF})
    base = _baseline({"grad/b": -noise, "grad/w": REF, "weight/w": REF})
    rows = {r["tensor"]: r for r in compare.per_tensor(device, cpu, base, RTOL)}
    assert rows["grad/b"]["ok"] and rows["grad/b"]["vs_baseline"] < 1e-5
    assert not rows["grad/w"]["ok"] and rows["grad/w"]["vs_cpu"] == pytest.approx(0.01, rel=1e-5)
    assert compare.floors(cpu) == {"grad": 4e-3, "weight": 4e-3}
    assert compare.floors(_cap("cpu", {"act/mask/out/0": torch.tensor([-3e38, 0.0])})) == {}


def test_a_gradient_error_starts_where_what_backward_reads_agrees_and_what_it_computes_does_not() -> None:
    """A fault in b's backward (forward order a, b, c): c's backward is right, b's gives a wrong gradient to its input
    and its weight; a inherits it, as does the root, which contains b."""
    rows = [
        _row("act/a/in/0", "a", 0.0), _row("act/a/out/0", "a", 0.0), _row("act/b/out/0", "b", 0.0),
        _row("act/(root)/out/0", "(root)", 0.0),
        _row("actgrad/(root)/out/0", "(root)", 0.0),
        _row("actgrad/c/out/0", "c", 0.0), _row("actgrad/c/in/0", "c", 0.0),
        _row("actgrad/b/out/0", "b", 0.0), _row("actgrad/b/in/0", "b", 0.01),
        _row("grad/b.weight", "b", 0.01), _row("grad/c.weight", "c", 0.0),
        _row("actgrad/a/out/0", "a", 0.01), _row("grad/a.weight", "a", 0.02),
    ]  # fmt: skip
    order = ["a", "b", "c", "(root)"]
    [found] = compare.grad_origins(rows, order, "cpu", RTOL)
    assert (found["call"], found["input_error"], found["output_error"]) == ("b", 0.0, 0.01)
    weight_only = [r for r in rows if r["tensor"] != "actgrad/b/in/0"]  # b's input is data: its weight says it
    assert [o["layer"] for o in compare.grad_origins(weight_only, order, "cpu", RTOL)] == ["b"]
    assert compare.grad_origins(rows, order, "cpu", 0.1) == [] and compare.origins(rows, order, "cpu", RTOL) == []


def test_an_error_that_starts_in_forward_is_not_named_again_in_backward() -> None:
    """b's output is 1 % off (and so, through the scaling, is its weight's gradient); block, around b, dilutes the
    error under rtol (a residual), as Llama's decoder layer does: neither is where a gradient error starts."""
    rows = [
        _row("act/block/in/0", "block", 0.0), _row("act/block/out/0", "block", RTOL * 0.8),
        _row("act/block.b/in/0", "block.b", 0.0), _row("act/block.b/out/0", "block.b", 0.01),
        _row("act/head/in/0", "head", RTOL * 0.8), _row("act/head/out/0", "head", RTOL * 0.9),
        _row("actgrad/head/out/0", "head", 0.0), _row("actgrad/head/in/0", "head", 1e-4),
        _row("actgrad/block/out/0", "block", 1e-4), _row("actgrad/block.b/out/0", "block.b", 1e-4),
        _row("grad/block.b.weight", "block.b", 0.01), _row("grad/head.weight", "head", 0.009),
    ]  # fmt: skip
    order = ["block.b", "block", "head"]
    assert [o["layer"] for o in compare.origins(rows, order, "cpu", RTOL)] == ["block.b"]
    assert compare.grad_origins(rows, order, "cpu", RTOL) == []


def test_an_error_of_the_root_s_own_code_is_named_at_the_root_only_when_no_module_in_it_is() -> None:
    """The root scales lin(lin(x)) by its own weight: a fault in that product reaches both calls of lin through the
    gradient they are given, and the root's weight; only the root computes wrongly from what it read."""
    grads = [
        _row("actgrad/(root)/out/0", "(root)", 0.0), _row("grad/scale", "(root)", 0.01),
        _row("actgrad/lin#2/out/0", "lin", 0.01), _row("actgrad/lin#2/in/0", "lin", 0.01),
        _row("actgrad/lin/out/0", "lin", 0.01), _row("grad/lin.weight", "lin", 0.01),
    ]  # fmt: skip
    order = ["lin", "lin#2", "(root)"]
    assert [o["layer"] for o in compare.grad_origins(grads, order, "cpu", RTOL)] == ["(root)"]
    outputs = [_row("act/(root)/in/0", "(root)", 0.0), _row("act/(root)/out/0", "(root)", 0.2)]
    assert [o["layer"] for o in compare.origins(outputs, order, "cpu", RTOL)] == ["(root)"]
    inner = [_row("act/lin/in/0", "lin", 0.0), _row("act/lin/out/0", "lin", 0.2)]
    assert [o["layer"] for o in compare.origins(outputs + inner, order, "cpu", RTOL)] == ["lin"]


def test_the_worst_inside_a_module_is_the_worst_of_the_modules_nested_in_it() -> None:
    worst = {"h": 0.1, "h.1": 0.2, "h.1.attn": 0.7, "h.10": 0.3, "h2": 0.9, "lm_head": 0.4, compare.ROOT: 5.0}
    inside = compare._worst_inside(worst)
    for layer in [*worst, "h.1.mlp", "missing"]:  # by the definition, each pair of modules compared
        expected = max((e for m, e in worst.items() if compare._inside(m, layer)), default=0.0)
        assert inside.get(layer, 0.0) == expected, layer
    assert inside["h"] == 0.7 and inside["h.1"] == 0.7 and inside[compare.ROOT] == 0.9  # h2 is not inside h
