"""``spothop report`` shows which replica served each restore and how long it took."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import Checkpointer
from spothop.checkpoint.replicas import PROVIDER_ENV, REGION_ENV
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore


def test_the_report_lists_each_restore_with_its_replica_and_seconds(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    primary = tmp_path / "primary"
    replicas = {"aws-sim/us-east-1": str(tmp_path / "use1"), "eu-west-1": str(tmp_path / "euw1")}
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with JobStore(url) as store:
        spec = {
            "name": "t",
            "run": "true",
            "checkpoint": {"url": str(primary), "replicas": replicas},
        }
        job_id = store.create_job(load_job(spec))
    monkeypatch.setenv(PROVIDER_ENV, "aws-sim")
    monkeypatch.setenv(REGION_ENV, "us-east-1")
    with Checkpointer(str(primary), local_url=str(tmp_path / "d1"), replicas=replicas) as ckpt:
        ckpt.save({"w": np.ones(256)}, 3).wait()
    for region, disk in (("eu-west-1", "d2"), ("ap-south-1", "d3")):
        monkeypatch.setenv(REGION_ENV, region)
        with Checkpointer(str(primary), local_url=str(tmp_path / disk), replicas=replicas) as c:
            assert c.restore() is not None

    result = cli("report", job_id, "--json", "--store", url)
    assert result.code == 0, result.err
    restores = result.json()["restores"]
    assert [(r["region"], r["served_by"], r["from_own_region"]) for r in restores] == [
        ("eu-west-1", "eu-west-1", True),
        # No replica in ap-south-1: the same provider's replica is the nearest one named.
        ("ap-south-1", "aws-sim/us-east-1", False),
    ]
    assert all(r["step"] == 3 and r["seconds"] > 0 for r in restores)

    text = cli("report", job_id, "--store", url)
    assert text.code == 0, text.err
    assert "restores" in text.out and "aws-sim/ap-south-1" in text.out
    assert "eu-west-1" in text.out
