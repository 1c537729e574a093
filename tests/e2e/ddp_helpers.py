"""What the data-parallel e2e tests share: the example's command, its uninterrupted reference run
(once per session, 2 plain processes, no agent) and readers of the per-step records it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.launcher import group_port
from tests.jobs.e2e.conftest import script_job

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "ddp" / "train.py"
STEPS = 60
STEP_SLEEP_S = 0.02


def train_command(steps: int, out: Path, seen: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(SCRIPT),
        "--steps",
        str(steps),
        "--out",
        str(out),
        "--seen",
        str(seen),
        *extra,
    ]


def job_command(steps: int, out: Path, seen: Path, *extra: str) -> dict[str, str]:
    """A job's ``workdir`` and ``run`` for the example: its folder uploaded, run by the
    instance's own ``python`` (an instance sees nothing of this machine but the buckets)."""
    return script_job(SCRIPT, "--steps", steps, "--out", out, "--seen", seen, *extra)


def start_reference(tmp: Path, nnodes: int, steps: int) -> list[subprocess.Popen[bytes]]:
    """The same script with no agent: ``nnodes`` processes of one process each, uninterrupted."""
    procs = []
    port = group_port("reference", os.getpid() % 1000)
    for node in range(nnodes):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "NODE_RANK": str(node),
            "NNODES": str(nnodes),
            "NPROC_PER_NODE": "1",
            "WORLD_SIZE": str(nnodes),
            "SPOTHOP_HOME": str(tmp / "reference-home"),
        }
        for name in ("SPOTHOP_AGENT_DIR", "SPOTHOP_CHECKPOINT_URL"):
            env.pop(name, None)
        # An instance's environment is its own (no BLAS kernel forced): the reference's too.
        env = {k: v for k, v in env.items() if not k.startswith(("OPENBLAS_", "NVPL_"))}
        command = train_command(
            steps,
            tmp / "reference.bin",
            tmp / "reference-seen",
            "--checkpoint-url",
            str(tmp / "reference-ckpt"),
        )
        log = open(tmp / f"reference-{node}.log", "wb")  # noqa: SIM115 (closed with the process)
        procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


@dataclass
class Reference:
    """An uninterrupted run of the example: 2 ranks, :data:`STEPS` steps, started in the background."""

    folder: Path
    procs: list[subprocess.Popen[bytes]]

    def wait(self) -> Reference:
        for node, p in enumerate(self.procs):
            code = p.wait(timeout=180)
            assert code == 0, (self.folder / f"reference-{node}.log").read_text()
        return self

    @property
    def weights(self) -> bytes:
        return (self.wait().folder / "reference.bin").read_bytes()

    @property
    def seen(self) -> Path:
        return self.wait().folder / "reference-seen"


@pytest.fixture(scope="session")
def ddp_reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    """One reference for every test of the same shape (2 ranks, :data:`STEPS` steps): its weights
    are a pure function of both, so it is run once, while the first test's job runs."""
    folder = tmp_path_factory.mktemp("ddp-reference")
    reference = Reference(folder, start_reference(folder, 2, STEPS))
    yield reference
    for p in reference.procs:
        if p.poll() is None:
            p.kill()


def records(seen: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(seen.glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def trajectory(seen: Path) -> dict[int, list[dict[str, Any]]]:
    """Each step's records of the newest generation that ran it (a step redone after a loss
    counts once: the run that went on from it)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in records(seen):
        have = by_step.get(r["step"])
        if have is None or have[0]["generation"] < r["generation"]:
            by_step[r["step"]] = [r]
        elif have[0]["generation"] == r["generation"]:
            have.append(r)
    return by_step


def assert_every_sample_once_per_epoch(seen: Path, samples: int = 96) -> None:
    per_epoch: dict[int, list[int]] = {}
    for rows in trajectory(seen).values():
        for r in rows:
            per_epoch.setdefault(r["epoch"], []).extend(r["rows"])
    complete = [e for e, got in per_epoch.items() if len(got) >= samples]
    assert complete, per_epoch.keys()
    for epoch in complete:
        assert sorted(per_epoch[epoch]) == list(range(samples)), f"epoch {epoch}"
