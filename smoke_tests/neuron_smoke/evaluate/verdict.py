"""The evaluation's answer in one line: "ready", "ready with findings" or "not ready", with the counts per kind.

numerics   tensors beyond the bound, or present on one side only; a loss curve (--steps) that leaves the baseline's
readiness  ops in unsupported areas, float64 use, tied weights untied by the move
fallback   ops that fell back to the CPU
compile    a torch.compile failure in the shape sweep
A step that failed is always "not ready". `--fail-on` (default numerics) names the kinds that make it "not ready"
(exit 1); the others make it "ready with findings" (exit 0).
"""

from __future__ import annotations

from typing import Any

# torch-free: the option is checked when the arguments are parsed
KINDS = ("readiness", "fallback", "compile", "numerics")
DEFAULT_FAIL_ON = ("numerics",)


def counts(data: dict[str, Any]) -> dict[str, int]:
    r = data.get("readiness") or {}
    fallback = len(r.get("fallback") or [])
    compile_failed = int(bool(r.get("compile_failure")))
    gone = data.get("missing", {})
    numerics = sum(not t["ok"] for t in data.get("tensors", []))
    numerics += len(gone.get("only_in_baseline") or []) + len(gone.get("only_in_cpu_run") or [])
    numerics += int(bool((data.get("parity") or {}).get("diverged_at")))
    readiness = int(r.get("findings") or 0) - fallback - compile_failed
    return {"readiness": readiness, "fallback": fallback, "compile": compile_failed, "numerics": numerics}


def judge(data: dict[str, Any], fail_on: tuple[str, ...]) -> dict[str, Any]:
    found = counts(data)
    failing = data.get("failure") is not None or any(found[k] for k in fail_on)
    answer = "not ready" if failing else ("ready with findings" if any(found.values()) else "ready")
    parts = [f"{k} {found[k]}" for k in KINDS]
    step = "; the step failed" if data.get("failure") is not None else ""
    banner = f"verdict: {answer} ({', '.join(parts)}{step}; --fail-on {','.join(fail_on)})"
    return {"answer": answer, "counts": found, "fail_on": list(fail_on), "banner": banner}


def top_findings(data: dict[str, Any], limit: int = 5) -> list[str]:
    """The first findings for the console, each with where it is (module, and file:line where known)."""
    lines = []
    f = data.get("failure")
    if f:
        lines.append(f"step failed ({f['phase']}): {f['error']} [module {f['module'] or '-'}, {f['where'] or '-'}]")
    r = data.get("readiness") or {}
    lines += [f"unsupported {u['area']}: {u['op']} [module {u['module']}]" for u in r.get("unsupported", [])]
    lines += [f"fell back to CPU: {x['op']} [module {x['module']}]" for x in r.get("fallback", [])]
    if r.get("compile_failure"):
        lines.append(f"torch.compile failed: {r['compile_failure']['error']}")
    if (data.get("parity") or {}).get("finding"):
        lines.append(str(data["parity"]["finding"]))
    bad = sorted((t for t in data.get("tensors", []) if not t["ok"]), key=lambda t: -(t["vs_cpu"] or 0.0))
    lines += [f"beyond rtol: {t['tensor']} (source {t['source']}) [module {t['layer']}]" for t in bad]
    return lines[:limit]


def parse_fail_on(text: str) -> tuple[str, ...]:
    """--fail-on readiness,fallback,...: a ValueError names an unknown kind."""
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown kind(s) {', '.join(unknown) or 'none given'}; choose from {', '.join(KINDS)}")
    return kinds
