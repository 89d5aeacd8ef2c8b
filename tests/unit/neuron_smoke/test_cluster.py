"""neuron_smoke.cluster: the multi-node options, each value from its flag, else Slurm, else torchrun; bad values are
usage errors naming the variable or flag."""

from __future__ import annotations

import argparse

import pytest

from neuron_smoke import cluster
from neuron_smoke.errors import UsageError


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cluster.add_arguments(parser)
    return parser.parse_args(argv)


def test_no_multi_node_flag_is_a_single_host_run_even_under_slurm() -> None:
    assert cluster.from_args(args(), {"SLURM_NNODES": "4", "SLURM_NODEID": "1"}) is None


def test_flags_win() -> None:
    env = {"SLURM_NNODES": "8", "SLURM_NODEID": "5", "SLURM_JOB_NODELIST": "x[1-8]"}
    spec = cluster.from_args(args("--nnodes", "4", "--node-rank", "2", "--master", "127.0.0.2:4000"), env)
    assert spec is not None and (spec.nnodes, spec.node_rank, spec.master) == (4, 2, "127.0.0.2:4000")
    assert spec.sources == {"nnodes": "--nnodes", "node_rank": "--node-rank", "master": "--master"}


def test_slurm_gives_what_flags_do_not() -> None:
    env = {"SLURM_NNODES": "3", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "trn[4-5,9]", "SLURM_NTASKS": "3"}
    spec = cluster.from_args(args("--report-dir", "/fsx/r"), env)
    assert spec is not None and (spec.nnodes, spec.node_rank, spec.master) == (3, 1, "trn4:29500")
    assert str(spec.report_file()) == "/fsx/r/node-1.json" and spec.sources["master"] == "slurm"


def test_torchrun_environment_last_with_one_worker_per_node() -> None:
    env = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29611", "LOCAL_WORLD_SIZE": "1"}
    spec = cluster.from_args(args("--join-timeout", "5", "--report-dir", "r"), env)
    assert spec is not None and (spec.nnodes, spec.node_rank, spec.master, spec.join_timeout_s) == (
        2,
        1,
        "10.0.0.5:29611",
        5.0,
    )
    with pytest.raises(UsageError, match="LOCAL_WORLD_SIZE=8: verify-device is one process per node"):
        cluster.from_args(args("--report-dir", "r"), {**env, "LOCAL_WORLD_SIZE": "8"})


def test_one_node_needs_no_rank_or_master() -> None:
    spec = cluster.from_args(args("--nnodes", "1"), {})
    assert spec is not None and (spec.node_rank, spec.master) == (0, "127.0.0.1:29500")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (("--nnodes", "2"), {}, "needs --node-rank R"),
        (("--nnodes", "2", "--node-rank", "0"), {}, "needs --master ADDR"),
        (("--nnodes", "2", "--node-rank", "2", "--master", "h"), {}, "--node-rank 2 is not a rank of 2 node"),
        (
            (
                "--nnodes",
                "0",
            ),
            {},
            "--nnodes must be at least 1",
        ),
        (("--report-dir", "r"), {}, "needs --nnodes N"),
        (("--report-dir", "r"), {"SLURM_NNODES": "two"}, "SLURM_NNODES='two': must be a whole number"),
        (("--nnodes", "2", "--node-rank", "1", "--master", "h:99999"), {}, "port '99999' must be a number"),
        (("--nnodes", "2", "--node-rank", "1", "--master", "::1:5"), {}, r"write an IPv6 address as \[ADDR\]:PORT"),
        (("--nnodes", "2", "--node-rank", "1", "--master", ":5"), {}, "needs a host name"),
        (("--report-dir", "r"), {"SLURM_NNODES": "2", "SLURM_NTASKS": "4"}, "srun --ntasks-per-node=1"),
        (
            ("--report-dir", "r"),
            {"SLURM_NNODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "a[1-"},
            "SLURM_JOB_NODELIST",
        ),
    ],
)
def test_bad_values_are_usage_errors(argv: tuple[str, ...], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        cluster.from_args(args(*argv), env)


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "1e308", "604801"])
def test_a_join_timeout_not_over_0_and_within_a_week_is_refused_by_the_parser(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        args("--nnodes", "2", "--join-timeout", value)
    assert exited.value.code == 2
    expected = f"argument --join-timeout: must be a number of seconds over 0 and at most 604800 (a week): {value}"
    assert expected in capsys.readouterr().err


def test_ipv6_masters() -> None:
    assert cluster.parse_master("[fd00::2]:7000", "--master") == ("fd00::2", 7000)
    assert cluster.parse_master("[fd00::2]", "--master") == ("fd00::2", 29500)
    spec = cluster.ClusterSpec(2, 0, "fd00::2", 7000)
    assert spec.master == "[fd00::2]:7000" and spec.report_file() is None


@pytest.mark.parametrize(
    "option", [("--local-addr", "10.0.0.1"), ("--join-timeout", "60"), ("--allreduce-max-bytes", "1024")]
)
def test_a_node_option_on_a_single_host_is_refused_not_ignored(option: tuple[str, str]) -> None:
    with pytest.raises(UsageError, match=f"{option[0]} goes with the multi-node mode"):
        cluster.from_args(args(*option), {})
    assert cluster.from_args(args(*option, "--nnodes", "1"), {}) is not None


def test_the_join_timeout_not_given_is_the_default() -> None:
    spec = cluster.from_args(args("--nnodes", "1"), {})
    assert spec is not None and spec.join_timeout_s == cluster.DEFAULT_JOIN_TIMEOUT_S
