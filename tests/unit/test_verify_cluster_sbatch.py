"""scripts/slurm/verify-cluster.sbatch outside Slurm, with stand-ins for srun, scontrol and neuron-torch on PATH: the
job's verdict is cluster-report's, except for a job Slurm cancelled before its step could run, which has none (the
Slurm twin in tests/integration/test_slurm.py runs the script itself, but cannot time that cancel)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "verify-cluster.sbatch"


def _stand_ins(bin_dir: Path, srun_exit: int, job_state: str, report_exit: int) -> Path:
    """srun exits SRUN_EXIT; `scontrol show job` prints JOB_STATE; neuron-torch logs its arguments to calls.log."""
    log = bin_dir / "calls.log"
    stand_ins = {
        "srun": f'echo "srun $*" >>"{log}"\nexit {srun_exit}',
        "scontrol": (
            f'if [ "$1 $2" = "show hostnames" ]; then printf "n1\\nn2\\n"; exit 0; fi\n'
            f'echo "scontrol $*" >>"{log}"\n'
            f'echo "JobId=$3 JobName=neuron-verify-cluster JobState={job_state} Reason=None"'
        ),
        "neuron-torch": f'echo "neuron-torch $*" >>"{log}"\nexit {report_exit}',
    }
    bin_dir.mkdir()
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return log


def _run(
    tmp_path: Path, srun_exit: int, job_state: str, report_exit: int = 1, **settings: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    log = _stand_ins(tmp_path / "bin", srun_exit, job_state, report_exit)
    env = {
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
        "NEURON_TORCH_CLUSTER_DIR": str(tmp_path / "reports"),
        "NEURON_TORCH_VENV": str(tmp_path / "venv"),
        **settings,
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
    )
    return done, log.read_text() if log.exists() else ""


def test_a_job_cancelled_before_its_step_ran_gives_no_verdict(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, srun_exit=1, job_state="CANCELLED")
    assert done.returncode == 1
    assert "verify-cluster: job 42 was cancelled before its step ran; no verdict" in done.stderr
    assert "scontrol show job 42 -o" in calls and "neuron-torch" not in calls  # no report naming nodes missing


@pytest.mark.parametrize(("srun_exit", "report_exit"), [(1, 1), (0, 0), (0, 1)])
def test_otherwise_the_verdict_is_cluster_reports(tmp_path: Path, srun_exit: int, report_exit: int) -> None:
    """A node that failed (srun exits 1 while the job runs) is named by cluster-report, whose exit is the job's."""
    done, calls = _run(tmp_path, srun_exit=srun_exit, job_state="RUNNING", report_exit=report_exit)
    assert done.returncode == report_exit, done.stderr
    assert f"neuron-torch cluster-report {tmp_path / 'reports'} --expect 2" in calls
    assert ("scontrol show job" in calls) is bool(srun_exit)  # asked only when the step failed
    assert (tmp_path / "reports" / "slurm-nodes").read_text() == "n1\nn2\n"


def test_a_relative_report_folder_is_the_submit_folders_for_every_node_and_the_container(tmp_path: Path) -> None:
    """NEURON_TORCH_CLUSTER_DIR=reports: one absolute folder (the submit folder's), as the image's mount needs it, in
    the step's --report-dir and the report's folder alike."""
    done, calls = _run(
        tmp_path, srun_exit=0, job_state="RUNNING", report_exit=0, NEURON_TORCH_CLUSTER_DIR="reports",
        NEURON_TORCH_IMAGE="registry.example.com/neuron-torch:cell",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    reports = tmp_path / "reports"
    assert f"--container-mounts={reports}:{reports} " in calls and f"--report-dir {reports}\n" in calls, calls
    assert f"neuron-torch cluster-report {reports} --expect 2" in calls
