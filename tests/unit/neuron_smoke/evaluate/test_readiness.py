"""neuron_smoke.evaluate.readiness: unsupported areas, float64 use, fallback ops and compile failures, each with
the module that caused it, from an op inventory."""

from __future__ import annotations

import torch
from torch import nn

from neuron_smoke.evaluate import readiness
from neuron_smoke.evaluate.inventory import ROOT, Inventory, OpRecord
from tests.unit.neuron_smoke.evaluate._readiness import nothing_found


def _rec(op: str, module: str = "m", phase: str = "forward", calls: int = 1, **extra: object) -> OpRecord:
    return OpRecord(op, module, phase, calls, **extra)  # type: ignore[arg-type]


def test_unsupported_ops_are_grouped_by_area_op_and_module_with_their_calls() -> None:
    inv = Inventory(
        [
            _rec("aten::_fft_r2c.default", "spec", calls=2),
            _rec("aten::_fft_r2c.default", "spec", "backward", calls=3),  # the same op and module: counted together
            _rec("aten::_to_sparse.default", ROOT),
            _rec("aten::mm.default", ROOT, layouts={"sparse_coo"}),  # an ordinary op on a sparse tensor
            _rec("aten::mul.Tensor", "seq", nested=True),
            _rec("aten::_standard_gamma.default", "prior"),
            _rec("torch.sin", "f", under_transform=True),
            _rec("aten::addmm.default", "fc", calls=9),  # supported: not listed
            _rec("aten::values.default", ROOT),
            _rec("aten::index_values.default", ROOT),  # `values` as part of another name: not sparse
        ]
    )
    assert readiness.unsupported_ops(inv) == [
        {"area": "distributions", "op": "aten::_standard_gamma.default", "module": "prior", "calls": 1},
        {"area": "fft", "op": "aten::_fft_r2c.default", "module": "spec", "calls": 5},
        {"area": "func", "op": "torch.sin", "module": "f", "calls": 1},
        {"area": "nested", "op": "aten::mul.Tensor", "module": "seq", "calls": 1},
        {"area": "sparse", "op": "aten::_to_sparse.default", "module": ROOT, "calls": 1},
        {"area": "sparse", "op": "aten::mm.default", "module": ROOT, "calls": 1},
        {"area": "sparse", "op": "aten::values.default", "module": ROOT, "calls": 1},
    ]
    assert readiness.unsupported_ops(Inventory([_rec("aten::relu.default")])) == []


class Doubled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2).double()
        self.register_buffer("phase", torch.zeros(2, dtype=torch.complex128))
        self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))


def test_float64_use_lists_parameters_buffers_and_ops_once_each() -> None:
    inv = Inventory(
        [
            _rec("aten::addmm.default", "fc", dtypes={"float64"}),
            _rec("aten::addmm.default", "fc", "backward", dtypes={"float64"}),  # the same op and module
            _rec("aten::mul.Tensor", ROOT, dtypes={"complex128", "float32"}),
            _rec("aten::relu.default", "fc", dtypes={"float32"}),
        ]
    )
    assert readiness.float64_use(Doubled(), inv) == [
        {"what": "parameter", "name": "fc.weight", "module": "fc"},
        {"what": "parameter", "name": "fc.bias", "module": "fc"},
        {"what": "buffer", "name": "phase", "module": ROOT},
        {"what": "op", "name": "aten::addmm.default", "module": "fc"},
        {"what": "op", "name": "aten::mul.Tensor", "module": ROOT},
    ]
    assert readiness.float64_use(nn.Linear(2, 2), None) == []


def test_each_fallback_op_is_placed_under_every_module_that_called_it() -> None:
    inv = Inventory(
        [
            _rec("aten::gelu.default", "b", calls=2),
            _rec("aten::gelu.default", "a", calls=1),
            _rec("aten::gelu.default", "a", "backward", calls=4),
            _rec("aten::relu.default", "a"),
        ]
    )
    assert readiness.fallback_by_module(["aten::gelu", "aten::erfinv"], inv) == [
        {"op": "aten::gelu", "module": "a", "calls": 5},
        {"op": "aten::gelu", "module": "b", "calls": 2},
        {"op": "aten::erfinv", "module": None, "calls": None},  # fell back, but the inventory never saw it
    ]
    assert readiness.fallback_by_module(["gelu"], None) == [{"op": "gelu", "module": None, "calls": None}]
    assert readiness.fallback_by_module(None, inv) == []


def test_a_compile_failure_names_the_whole_word_ops_of_its_first_line() -> None:
    inv = Inventory([_rec("aten::mm.default", "a"), _rec("aten::addmm.default", "b"), _rec("aten::addmm.default", "c")])
    failure = readiness.compile_failure(ValueError("\n  cannot lower addmm for this graph\ntraceback"), inv)
    assert failure == {
        "error": "ValueError: cannot lower addmm for this graph",
        "ops": {"aten::addmm.default": ["b", "c"]},  # not mm: a word of its own only
    }
    assert readiness.compile_failure(RuntimeError(""), None) == {"error": "RuntimeError: RuntimeError", "ops": {}}
    assert readiness.compile_failure(None, inv) is None


def test_the_scan_counts_every_finding() -> None:
    inv = Inventory([_rec("aten::fft_rfft.default", "s"), _rec("aten::gelu.default", "g", dtypes={"float64"})])
    found = readiness.scan(Doubled(), inv, ["aten::gelu"], RuntimeError("gelu failed"))
    assert len(found["unsupported"]) == 1 and len(found["float64"]) == 4 and len(found["fallback"]) == 1
    assert found["findings"] == 1 + 4 + 1 + 1
    assert found["fallback_tracked"] is True and found["compile_failure"]["ops"] == {"aten::gelu.default": ["g"]}
    clean = readiness.scan(nn.Linear(2, 2), None, None, None)
    assert clean == nothing_found()
