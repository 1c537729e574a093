"""The launcher's environment carries the replicas and the instance's region to the worker's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spothop.checkpoint.replicas import read_restore_records
from spothop.jobs.launcher import WorkerCommand, bootstrap
from tests.waiting import scaled

WORKER = """
import json, sys
import numpy as np
from spothop.checkpoint import Checkpointer
with Checkpointer(local_url=sys.argv[2]) as ckpt:  # URL and replicas: from the environment
    if sys.argv[1] == "save":
        ckpt.save({"w": np.arange(1000, dtype=np.float64)}, 7).wait()
    else:
        restored = ckpt.restore()
        print(json.dumps({"url": restored.url, "step": restored.step,
                          "sum": float(restored.state["w"].sum())}))
"""


def _env(tmp_path: Path, region: str, replicas: dict[str, str]) -> dict[str, str]:
    work = WorkerCommand(
        run="true", checkpoint_url=str(tmp_path / "primary"), checkpoint_replicas=replicas
    )
    boot = bootstrap(
        work,
        job_id="j-1",
        node=0,
        attempt_id=f"a-{region}",
        provider="aws-sim",
        store_url="sqlite://",
        home=tmp_path / "home",
        region=region,
    )
    return {**os.environ, **boot.env}


def _worker(tmp_path: Path, region: str, replicas: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, *args],
        env=_env(tmp_path, region, replicas),
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_worker_in_another_region_restores_from_that_regions_replica(tmp_path: Path) -> None:
    replicas = {
        "aws-sim/us-east-1": str(tmp_path / "use1"),
        "aws-sim/eu-west-1": str(tmp_path / "euw1"),
    }
    env = _env(tmp_path, "us-east-1", replicas)
    assert env["SPOTHOP_REGION"] == "us-east-1" and env["SPOTHOP_PROVIDER"] == "aws-sim"
    assert json.loads(env["SPOTHOP_CHECKPOINT_REPLICAS"]) == replicas
    _worker(tmp_path, "us-east-1", replicas, "save", str(tmp_path / "disk-1"))
    out = json.loads(_worker(tmp_path, "eu-west-1", replicas, "restore", str(tmp_path / "disk-2")))
    assert out == {"url": str(tmp_path / "euw1"), "step": 7, "sum": float(sum(range(1000)))}
    (record,) = read_restore_records(str(tmp_path / "primary"))
    assert (record.served_by, record.region, record.from_own_region) == (
        "aws-sim/eu-west-1",
        "eu-west-1",
        True,
    )


def test_no_replicas_means_no_replica_variable(tmp_path: Path) -> None:
    env = _env(tmp_path, "us-east-1", {})
    assert "SPOTHOP_CHECKPOINT_REPLICAS" not in env
    assert env["SPOTHOP_REGION"] == "us-east-1"


def test_the_executor_hands_the_instance_its_place_gpu_replicas_and_need(
    tmp_path: Path,
) -> None:
    import dataclasses as dc

    from spothop.jobs.controller import Launch
    from spothop.jobs.controller.executor import Executor
    from spothop.jobs.spec import load_job
    from spothop.jobs.store import JobStore
    from spothop.market import ManualClock
    from spothop.testing import FakeProvider, make_market, make_offerings
    from tests.jobs.exec.test_executor import _candidate
    from tests.waiting import wait_for

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=ManualClock())
    ex = Executor(store, {provider.name: provider}, store_url=url, home=tmp_path)
    try:
        replicas = {"fake-1": "s3://ckpt-fake-1/run", "other/r9": "s3://ckpt-r9/run"}
        spec = {
            "name": "t",
            "run": "true",
            "checkpoint": {
                "url": "s3://ckpt/run",
                "replicas": replicas,
                "compatibility": {"min_architecture": "Ampere"},
            },
        }
        job_id = store.create_job(load_job(spec))
        offering = provider.list_offerings()[0]
        candidate = dc.replace(_candidate(offering))
        assert ex.step(Launch(job_id, 0, (candidate,), "tok", "first launch")).ok
        wait_for(lambda: not ex.launching(), 10, what="the launch to end")
        env = provider.requests[-1].env
    finally:
        ex.close()
        store.close()
    assert json.loads(env["SPOTHOP_CHECKPOINT_REPLICAS"]) == replicas
    assert env["SPOTHOP_REGION"] == offering.region
    assert env["SPOTHOP_PROVIDER"] == provider.name
    # The offering's GPU and the spec's need, for the restore-side matrix check.
    assert env["SPOTHOP_GPU"] == offering.gpu
    assert json.loads(env["SPOTHOP_CHECKPOINT_COMPAT"]) == {"min_architecture": "Ampere"}
