"""Unit tests of neuron_smoke.context: the Options defaults, what a StageLog collects, and the Context's derived
device, compile backend and compiled-vs-eager bound."""

from __future__ import annotations

from neuron_smoke import registry
from neuron_smoke.backends import BACKENDS
from neuron_smoke.context import DEFAULT_EAGER_RTOL, Context, Options, StageLog


def test_options_default_to_every_stage_on_neuron() -> None:
    options = Options()
    assert options.stages == registry.NAMES and options.device == "neuron"
    assert Options().allow_fallback == frozenset() and Options(nproc=4).nproc == 4


def test_stage_log_keeps_failures_advisories_and_notes_apart() -> None:
    log = StageLog()
    log.fail("broken")
    log.fail_nonblocking("pip check complains")
    log.note("ran on 2 devices")
    log.fail("broken again")
    assert log.failures == ["broken", "broken again"]
    assert (log.advisories, log.notes) == (["pip check complains"], ["ran on 2 devices"])
    assert StageLog().failures == [], "each log has its own lists"


def test_the_compile_backend_is_the_option_else_the_backend_table() -> None:
    for backend in BACKENDS.values():
        ctx = Context(Options(device=backend.name), backend)
        assert ctx.device == backend.device_type and ctx.compile_backend() == backend.compile_backend
        assert Context(Options(compile_backend="eager"), backend).compile_backend() == "eager"


def test_the_eager_bound_is_the_option_then_the_model_stage_then_the_default() -> None:
    ctx = Context(Options(device="cpu"), BACKENDS["cpu"])
    assert ctx.eager_rtol() == DEFAULT_EAGER_RTOL
    ctx.shared["model_rtol"] = 0.25
    assert ctx.eager_rtol() == 0.25
    ctx.options.model_rtol = 0.5
    assert ctx.eager_rtol() == 0.5
