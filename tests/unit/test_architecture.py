"""The shape of the code: the packages (src/neuron_torch, src/neuron_cell, smoke_tests/neuron_smoke) have no import
cycle; no file of theirs or of scripts/ is over 400 lines, no function over 60 lines; every module has its unit test
file, tests/unit/<package>/test_<module>.py.

The imports are read with `ast`, including those inside functions (an import at call time hides a cycle, it does not
remove it) and those under `if TYPE_CHECKING:` (mypy follows them). packaging's vendored module is packaging's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests import REPO_ROOT

SRC = REPO_ROOT / "src"
# package -> the folder its import root is (the folder holding the package)
PACKAGES = {"neuron_torch": SRC, "neuron_cell": SRC, "neuron_smoke": REPO_ROOT / "smoke_tests"}
VENDORED = SRC / "neuron_cell" / "vendor"
UNIT = REPO_ROOT / "tests" / "unit"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules() -> dict[str, Path]:
    """Every module of the three packages, by dotted name."""
    found = {}
    for package, root in PACKAGES.items():
        for path in sorted((root / package).rglob("*.py")):
            if VENDORED in path.parents:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def checked_files() -> list[Path]:
    """What the size limits cover: the packages' modules and scripts/*.py."""
    return [*modules().values(), *sorted((REPO_ROOT / "scripts").glob("*.py"))]


def imported(path: Path, known: set[str]) -> set[str]:
    """The package's modules that `path` imports anywhere in its body."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name in known and name not in PACKAGES}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(path, set(found)) for name, path in found.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as the modules along it, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_and_passes_a_tree() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    assert {"neuron_torch.cli", "neuron_cell.lockgate", "neuron_smoke.suite"} <= set(graph), "a package is not read"
    assert "neuron_torch.cellinfo" in graph["neuron_torch.commands"]  # imported inside cmd_matrix
    assert graph["neuron_torch.generated"] <= {"neuron_torch.matrix"}, "generated.py is the emitters' leaf"


def test_src_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_neuron_cell_imports_nothing_but_itself() -> None:
    """neuron_cell runs with the cell's Python beside nothing else: no neuron_torch, no neuron_smoke."""
    graph = import_graph()
    leaks = {
        m: sorted(t for t in ts if not t.startswith("neuron_cell"))
        for m, ts in graph.items()
        if m.startswith("neuron_cell")
    }
    assert not any(leaks.values()), leaks


def function_lengths(path: Path, root: Path = REPO_ROOT) -> dict[str, int]:
    """Each function's length in lines (decorators and docstring included), by `file:line name`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        f"{path.relative_to(root)}:{node.lineno} {node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_the_length_check_measures_functions(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def short():\n    return 1\n\n\ndef longer():\n" + "    x = 1\n" * 70)
    assert function_lengths(sample, tmp_path) == {"sample.py:1 short": 2, "sample.py:5 longer": 71}


def test_no_file_over_400_lines() -> None:
    counts = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in checked_files()}
    long = [f"{path.relative_to(REPO_ROOT)} ({n} lines)" for path, n in counts.items() if n > MAX_FILE_LINES]
    assert not long, f"files over {MAX_FILE_LINES} lines: {', '.join(long)}"


def test_no_function_over_60_lines() -> None:
    lengths = {name: n for path in checked_files() for name, n in function_lengths(path).items()}
    long = [f"{name} ({n} lines)" for name, n in lengths.items() if n > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


def unit_test_file(module: str) -> Path:
    """tests/unit/<package>/<subpackage>/test_<module>.py of a dotted module name."""
    *folders, name = module.split(".")
    return UNIT.joinpath(*folders, f"test_{name}.py")


def test_every_module_has_its_unit_test_file() -> None:
    """A package's __init__ and __main__ are its entry, not modules of their own: every other module has a file."""
    wanted = [m for m, path in modules().items() if path.name not in ("__init__.py", "__main__.py")]
    missing = [str(unit_test_file(m).relative_to(REPO_ROOT)) for m in wanted if not unit_test_file(m).is_file()]
    assert not missing, f"{len(missing)} module(s) without a unit test file: {', '.join(missing)}"
