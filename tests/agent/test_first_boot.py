"""The first-boot probe: run once per instance type, only on a GPU machine, never fatal."""

from __future__ import annotations

import subprocess

from spothop.agent.first_boot import probe_first_boot
from spothop.cli.main import main


def _fake(returncode: int = 0, stdout: str = "{}", stderr: str = ""):  # type: ignore[no-untyped-def]
    calls: list[list[str]] = []

    def runner(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    return runner, calls


def test_probes_and_records_the_instance_type_on_a_gpu_machine() -> None:
    runner, calls = _fake()
    outcome = probe_first_boot("aws", "p5.48xlarge", runner=runner, gpu_present=lambda: True)
    assert outcome.ran and outcome.reason == "recorded"
    (command,) = calls
    assert command[-7:] == [
        "probe",
        "--record",
        "aws/p5.48xlarge",
        "--if-unmeasured",
        "--budget-s",
        "60.0",
        "--json",
    ]


def test_no_gpu_means_no_probe() -> None:
    runner, calls = _fake()
    outcome = probe_first_boot("aws-sim", "g5.xlarge", runner=runner, gpu_present=lambda: False)
    assert not outcome.ran and "no NVIDIA GPU" in outcome.reason and calls == []


def test_a_failing_probe_is_reported_not_raised() -> None:
    runner, _ = _fake(returncode=2, stdout="", stderr="Traceback...\nerror: CUDA unavailable")
    outcome = probe_first_boot("aws", "p5.48xlarge", runner=runner, gpu_present=lambda: True)
    assert not outcome.ran and outcome.reason == "probe exited 2: error: CUDA unavailable"

    def boom(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(command, timeout_s)

    assert (
        "failed to run"
        in probe_first_boot("aws", "p5", runner=boom, gpu_present=lambda: True).reason
    )


def test_if_unmeasured_skips_a_measured_type(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    measured = {("aws", "p5.48xlarge"): 700.0}
    monkeypatch.setattr("spothop.cli.probe.measured_tflops", lambda p, t: measured.get((p, t)))
    assert main(["probe", "--record", "aws/p5.48xlarge", "--if-unmeasured", "--json"]) == 0
    captured = capsys.readouterr()
    assert "measured already" in captured.err and captured.out == ""
