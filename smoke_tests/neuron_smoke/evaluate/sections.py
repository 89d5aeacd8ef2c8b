"""The report's sections, built from the JSON data alone: summary, where errors start, per layer, per tensor,
loss over steps, timing, readiness, fallback by module, shape sweep, op inventory."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from neuron_smoke.evaluate import buckets, plots, sweep

MAX_TENSOR_ROWS = 60


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    image: tuple[str, bytes] | None = None  # (file name, PNG)


def build_sections(data: dict[str, Any]) -> list[Section]:
    sections = [_summary(data)]
    if "tensors" in data:
        sections += [_origins(data), _layers(data), _tensors(data)]
    sections += [_parity(data["parity"])] if data.get("parity") else []
    sections += ([_timing(data)] if data.get("timing") else []) + [_readiness(data)]
    if data["readiness"]["fallback"]:
        sections.append(_fallback(data))
    if "sweep" in data:
        sections.append(_sweep(data["sweep"]))
    sections.append(_inventory(data))
    return sections


def _summary(data: dict[str, Any]) -> Section:
    m, d, v = data["model"], data["device"], data["versions"]
    s = Section("Summary")
    if "verdict" in data:
        s.text.append(f"**{data['verdict']['banner']}**")
    s.text.append(
        f"Mode {data['mode']}; model {m['name']} ({m['class']}, {m['parameters']:,} parameters); device "
        f"{d['backend']} (compile backend {d['compile_backend']}); torch {v['torch']}, torch-neuronx "
        f"{v.get('torch-neuronx')}; exit code {data.get('exit_code')}."
    )
    if data.get("failure"):
        f = data["failure"]
        s.text.append(
            f"The step failed ({f['phase']}): {f['error']}; module {f['module'] or '-'}, op {f['op'] or '-'}, at "
            f"{f['where'] or '-'}. Nothing after it was measured."
        )
    if "baseline" in data:
        b = data["baseline"]
        s.text.append(
            f"Baseline {b['path']}: recorded {b['started']} on {b['device']['backend']} with torch "
            f"{b['versions']['torch']}."
        )
    if "tensors" in data:
        bad = [r for r in data["tensors"] if not r["ok"]]
        s.text.append(f"{len(data['tensors'])} tensors compared; {len(bad)} beyond rtol {data['rtol']:g}.")
    s.text.append(f"Readiness findings: {data['readiness']['findings']}.")
    p = data.get("precision")
    if p:
        s.text.append(f"Precision {p['name']}: {p['note']}. Bound rtol {data['rtol']:g} (from {p['bound_from']}).")
        if p["baseline"] not in (None, p["name"]):
            s.text.append(f"The baseline was recorded at {p['baseline']}: the wider of the two bounds applies.")
    if data.get("random_ops"):
        drawn = ", ".join(f"{op} x{n}" for op, n in data["random_ops"].items())
        s.text.append(
            f"Random ops ({drawn}) drew from one CPU generator seeded alike on every side, so dropout masks match "
            "the baseline's; the device's own random kernels were not compared."
        )
    if not plots.available():
        s.text.append("Plots omitted: matplotlib is not installed (pip install the neuron-torch `eval` extra).")
    return s


def _origins(data: dict[str, Any]) -> Section:
    s = Section("Where errors start")
    s.text.append(
        "A layer is named when its inputs agree with the reference and its output does not (by at least 10x its "
        "inputs' error): the error starts there. Later layers inherit it and are not named. Gradients by the same "
        "rule, run backward: a layer's inputs are what its backward reads (the gradient reaching its outputs, its "
        "forward values), its outputs what it computes (the gradient it passes on to its inputs, its weights' "
        "gradients). An error that starts in forward is not named again in backward."
    )
    grads = data.get("grad_origins", {})
    for ref, found in data["origins"].items():
        named = [", ".join(o["layer"] for o in f) or "no layer" for f in (found, grads.get(ref, []))]
        s.text.append(f"Against the {ref}: the error starts in {named[0]}; the gradient error starts in {named[1]}.")
    s.headers = ["reference", "error in", "layer", "input error", "output error"]
    for kind, origins in (("outputs", data["origins"]), ("gradients", grads)):
        for ref, found in origins.items():
            s.rows += [[ref, kind, o["call"], o["input_error"], o["output_error"]] for o in found]
            if not found:
                s.rows.append([ref, kind, "none", None, None])
    return s


def _layers(data: dict[str, Any]) -> Section:
    s = Section("Per layer")
    png = plots.layer_errors(data["layers"], data["rtol"])
    if png is not None:
        s.image = ("report-layers.png", png)
    keys = ["output", "grad", "weight"]
    s.headers = ["layer"] + [f"{k} vs {ref}" for k in keys for ref in ("baseline", "cpu")]
    for entry in data["layers"]:
        s.rows.append([entry["layer"]] + [entry.get(f"{k}_vs_{ref}") for k in keys for ref in ("baseline", "cpu")])
    return s


def _tensors(data: dict[str, Any]) -> Section:
    s = Section("Per tensor")
    rows = sorted(data["tensors"], key=lambda r: -max(r["vs_cpu"] or 0.0, r["vs_baseline"] or 0.0))
    shown = [r for r in rows if not r["tensor"].startswith(("act/", "actgrad/"))][:MAX_TENSOR_ROWS]
    s.text.append(
        f"Outputs, loss, gradients and updated weights, worst first ({len(shown)} shown; activations and the "
        "gradients at them are in the JSON). source: device = differs from the same machine's CPU; environment = "
        "agrees with the CPU here, not with the baseline."
    )
    s.headers = ["tensor", "shape", "vs baseline", "vs cpu", "cpu vs baseline", "source", "ok"]
    for r in shown:
        shape = "x".join(map(str, r["shape"])) or "scalar"
        ok = "ok" if r["ok"] else "FAIL"
        s.rows.append([r["tensor"], shape, r["vs_baseline"], r["vs_cpu"], r["cpu_vs_baseline"], r["source"], ok])
    return s


def _loss(value: float | None) -> str | None:
    """A loss to six digits (the table's three would merge losses that part in the fourth)."""
    return None if value is None else f"{value:.6g}"


def _parity(p: dict[str, Any]) -> Section:
    s = Section(f"Loss over {p['steps']} steps")
    s.text.append(
        f"Optimizer {p['optimizer']}, precision {p['precision']}; the loss of step k is that of the weights after "
        f"k - 1 updates. Each step's relative error is held to rtol {p['rtol']:g}."
    )
    compared = p["loss"]["baseline"] is not None or p["loss"]["cpu"] is not None
    s.text.append(p["finding"] or ("The curves agree at every step." if compared else "Nothing to compare it with."))
    png = plots.loss_curves(p["loss"], p["diverged_at"])
    if png is not None:
        s.image = ("report-loss.png", png)
    s.headers = ["step", "device", "baseline", "cpu", "vs baseline", "vs cpu", "ok"]
    s.rows = [
        [r["step"], _loss(r["device"]), _loss(r["baseline"]), _loss(r["cpu"]), r["vs_baseline"], r["vs_cpu"],
         "ok" if r["ok"] else "FAIL"]
        for r in p["rows"]
    ]  # fmt: skip
    return s


def _timing(data: dict[str, Any]) -> Section:
    s = Section("Timing (forward, loss, backward)")
    s.headers = ["run", "device", "first call (s)", "p50 (ms)", "p95 (ms)", "iterations"]
    t = data["timing"]
    s.rows.append(["this run", data["device"]["backend"], t["first_call_s"], t["p50_ms"], t["p95_ms"], t["iterations"]])
    if "baseline" in data:
        b = data["baseline"]["timing"]
        dev = data["baseline"]["device"]["backend"]
        s.rows.append(["baseline", dev, b["first_call_s"], b["p50_ms"], b["p95_ms"], b["iterations"]])
    return s


def _readiness(data: dict[str, Any]) -> Section:
    r = data["readiness"]
    s = Section("Readiness")
    if not r["fallback_tracked"]:
        s.text.append(f"CPU fallback is not tracked on {data['device']['backend']}; run on the neuron device.")
    if not r.get("compile_tried"):
        s.text.append("torch.compile was not tried: pass --shapes to compile the model per input shape.")
    if r["compile_failure"]:
        ops = r["compile_failure"]["ops"]
        where = "; ".join(f"{op} in {', '.join(mods)}" for op, mods in ops.items()) or "no op named"
        s.text.append(f"torch.compile failed: {r['compile_failure']['error']} ({where}).")
    s.headers = ["finding", "what", "module", "calls"]
    s.rows += [[f"unsupported area: {u['area']}", u["op"], u["module"], u["calls"]] for u in r["unsupported"]]
    s.rows += [["float64 runs as float32", f"{f['what']} {f['name']}", f["module"], None] for f in r["float64"]]
    s.rows += [["fell back to CPU", f["op"], f["module"], f["calls"]] for f in r["fallback"]]
    s.rows += [["tied weights untied by .to(device)", note, None, None] for note in r.get("untied", [])]
    if not s.rows and not r["compile_failure"]:
        s.text.append("Nothing found.")
        s.headers = []
    return s


def _fallback(data: dict[str, Any]) -> Section:
    s = Section("Fallback ops by module")
    png = plots.fallback_modules(data["readiness"]["fallback"])
    if png is not None:
        s.image = ("report-fallback.png", png)
    return s


def _sweep(sw: dict[str, Any]) -> Section:
    s = Section("Shape sweep (torch.compile, dynamic=False)")
    if sw.get("failed_at"):
        phase = f" in the {sw['failed_in']}" if sw.get("failed_in") else ""
        s.text.append(f"torch.compile failed at shape {sw['failed_at']}{phase}; see Readiness.")
    s.text.append(
        f"The compiled training step ({sw['step']}), {sw['steps']} timed step(s) a shape after the first: "
        f"{sweep.summary(sw)}. {sw['buckets']['note']}."
    )
    s.text += sweep.break_lines(sw) + buckets.lines(sw["buckets"])
    png = plots.sweep_times(sw["shapes"])
    if png is not None:
        s.image = ("report-sweep.png", png)
    s.headers = ["shape", "graphs", "graph breaks", "first call (s)", "compile (s)", "p50 (ms)", "p95 (ms)", "items/s"]
    keys = ("shape", "compiled_graphs", "graph_breaks", "first_call_s", "compile_s", "p50_ms", "p95_ms", "items_per_s")
    s.rows = [[r[k] for k in keys] for r in sw["shapes"]]
    return s


def _inventory(data: dict[str, Any]) -> Section:
    s = Section("Op inventory (one step, forward and backward)")
    calls: Counter[str] = Counter()
    dtypes: dict[str, set[str]] = {}
    modules: dict[str, set[str]] = {}
    for r in data["inventory"]:
        calls[r["op"]] += r["calls"]
        dtypes.setdefault(r["op"], set()).update(r["dtypes"])
        modules.setdefault(r["op"], set()).add(r["module"])
    s.text.append(f"{len(calls)} distinct ops, {sum(calls.values())} calls; per module in the JSON (`inventory`).")
    s.headers = ["op", "calls", "dtypes", "modules"]
    for op, n in calls.most_common():
        mods = sorted(modules[op])
        shown = ", ".join(mods[:4]) + (f" (+{len(mods) - 4})" if len(mods) > 4 else "")
        s.rows.append([op, n, ", ".join(sorted(dtypes[op])), shown])
    return s
