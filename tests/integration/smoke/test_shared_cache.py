"""A compile cache a cluster shares (issue 26 item 4), on the simulated device: node 0 runs verify-device with a
shared TORCH_NEURONX_NEFF_CACHE_DIR (an FSx or EFS mount on AWS) and, the cache being empty, compiles stage 4's
graphs; node 1, started after it with the same folder, compiles none and loads every one. Each node is a host of its
own (its own device nodes and runtime folder, so its own NeuronCores); only the cache folder is shared. The counts are
the simulated device's compile counters (tests/simdevice/README.md), as the compile stage reports them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.smoke.conftest import SIM_CELL, Verify, make_base_env
from tests.simdevice.environment import sim_environment


def test_a_node_started_after_another_on_a_shared_cache_compiles_no_graph(
    sim_library: Path, tmp_path: Path, fverify: Verify
) -> None:
    shared = tmp_path / "fsx" / "neff-cache"
    numbers = []
    for rank in (0, 1):
        folder = tmp_path / f"node-{rank}"
        folder.mkdir()
        env = {**sim_environment(make_base_env(folder), folder), "TORCH_NEURONX_NEFF_CACHE_DIR": str(shared)}
        env["NEURON_RT_VISIBLE_CORES"] = "0"  # one core: no fresh-process probes (the clean run has them)
        (folder / "cell.json").write_text(json.dumps(SIM_CELL))
        args = ("--cell-file", str(folder / "cell.json"), "--stages=environment,device,model,compile")
        run = fverify(env, *args, tmp=folder)
        assert run.returncode == 0, run.output
        numbers.append(run.stage("compile")["numbers"])
    first, second = numbers
    assert first["compile_cache_dir"] == second["compile_cache_dir"] == str(shared)
    assert "cold_first_call_s" not in first  # the probes' own caches are temporary: they never touch this one
    assert first["graphs_compiled"] > 0 and first["graphs_loaded"] == 0  # an empty cache: it compiles
    assert second["graphs_compiled"] == 0 and second["graphs_loaded"] == first["graphs_compiled"]
