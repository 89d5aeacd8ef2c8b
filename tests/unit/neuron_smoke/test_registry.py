"""registry.py: the stage table is runnable as written (each prerequisite an earlier row, each target a function of
this package), `needing` follows the needs column, and `check` refuses rows that could not run, naming the row."""

from __future__ import annotations

import pytest

from neuron_smoke import registry, stage_environment
from neuron_smoke.registry import LAUNCHER, MODEL, NEEDS, TABLE, Entry, check


def test_every_row_runs_after_earlier_rows_and_resolves_to_a_function() -> None:
    seen: list[str] = []
    for entry in TABLE:
        assert set(entry.after) <= set(seen), entry.name
        assert set(entry.needs) <= NEEDS
        assert callable(registry.resolve(entry.run))
        if entry.early:
            assert callable(registry.resolve(entry.early))
        seen.append(entry.name)
    assert tuple(seen) == registry.NAMES
    assert len(set(seen)) == len(seen)


def test_needing_lists_the_rows_of_each_need_in_table_order() -> None:
    for need in (MODEL, LAUNCHER):
        assert registry.needing(need) == tuple(e.name for e in TABLE if need in e.needs)
        assert registry.needing(need)  # each need has a stage that asks for it
    assert registry.needing("nothing") == ()


def test_start_early_calls_only_the_selected_rows_early_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(stage_environment, "start_pip_check", lambda: calls.append("environment"))
    with_early = [e.name for e in TABLE if e.early]
    without = [e.name for e in TABLE if not e.early]
    registry.start_early(without)
    assert calls == []
    registry.start_early([*without, *with_early])
    assert calls == [n for n in with_early if n == "environment"]


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ([Entry("a", "t", "stage_a:run"), Entry("a", "t", "stage_b:run")], "stage a: a second row"),
        ([Entry("b", "t", "stage_b:run", after=("b",))], "stage b: after b"),
        ([Entry("a", "t", "stage_a:run", needs=("gpu",))], "stage a: needs gpu"),
        ([Entry("a", "t", "class:run")], "stage a: 'class:run' is not module:function"),
        ([Entry("a", "t", "stage_a:run"), Entry("c", "t", "stage-c:run")], "stage c: 'stage-c:run'"),
        ([Entry("a", "t", "stage_a:run", early="pkg.mod")], "stage a: 'pkg.mod' is not"),
    ],
)
def test_check_refuses_a_row_that_cannot_run_naming_it(rows: list[Entry], problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        check(rows)
    assert str(raised.value).startswith(problem)


def test_check_accepts_a_dotted_module_and_prerequisites_in_order() -> None:
    check([Entry("a", "t", "sub.stage_a:run"), Entry("b", "t", "stage_b:run", after=("a",), needs=(MODEL,))])


def test_resolve_names_a_missing_module_or_function() -> None:
    with pytest.raises(ModuleNotFoundError, match="stage_nowhere"):
        registry.resolve("stage_nowhere:run")
    with pytest.raises(AttributeError, match="no_such_function"):
        registry.resolve("stage_dtype:no_such_function")


def test_with_prerequisites_adds_each_stage_a_selected_one_runs_after_theirs_too_in_table_order() -> None:
    assert registry.with_prerequisites(["matmul"]) == (("environment", "device", "matmul"), ("environment", "device"))
    # fallback runs after matmul and model, which run after environment and device
    stages, added = registry.with_prerequisites(["fallback", "dtype"])
    assert stages == ("environment", "device", "matmul", "model", "fallback", "dtype")
    assert added == ("environment", "device", "matmul", "model")
    assert registry.with_prerequisites(["nccom", "environment"]) == (("environment", "nccom"), ())
    assert registry.with_prerequisites(registry.NAMES) == (registry.NAMES, ())
    for entry in TABLE:  # closed: every stage in the answer has its own prerequisites in it, earlier
        stages, _ = registry.with_prerequisites([entry.name])
        for name in stages:
            after = next(e for e in TABLE if e.name == name).after
            assert all(stages.index(a) < stages.index(name) for a in after), (entry.name, name)
