"""A corpus of task files written from SkyPilot's and dstack's documentation (tests/jobs/dialects/)
plans as its authors meant: the dialect, the market, the GPU alternatives and the requirements the
scheduler filters by (``expect.requirements``: fields of ``Requirements.to_dict``), or a refusal
naming the key; every file is read through load_job, as spothop launch and plan read it. A case's
``make`` lists the folders its local sources name; ``launch_env`` is ``launch --env``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from spothop.errors import JobSpecError
from spothop.jobs.dialect import dialect_of
from spothop.jobs.spec import load_job

HERE = Path(__file__).parent / "dialects"
CASES = [
    pytest.param(case, id=f"{path.stem}:{case['name']}")
    for path in sorted(HERE.glob("*.yaml"))
    for case in yaml.safe_load(path.read_text())
]


def test_the_corpus_covers_both_dialects_broadly() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("case", CASES)
def test_each_file_plans_as_its_author_meant(
    case: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for folder in case.get("make", ()):  # the local sources the file names
        (tmp_path / folder).mkdir(parents=True)
    path = tmp_path / "task.yaml"
    path.write_text(case["file"])
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(JobSpecError) as caught:
            load_job(path, env=case.get("launch_env"))
        paths = {p for p, _ in caught.value.problems} or {str(caught.value)}
        assert any(expect["error"] in p for p in paths), caught.value
        return
    spec = load_job(path, env=case.get("launch_env"))
    assert dialect_of(yaml.safe_load(case["file"])) == expect["dialect"]
    assert spec.market == expect["market"]
    req = spec.requirements()
    shapes = req.alternatives or ((req,) if req.gpu or req.gpus_per_node else ())
    assert [[a.gpu, a.gpus_per_node] for a in shapes] == expect["gpus"]
    if "markets" in expect:  # each alternative's own market (SkyPilot's use_spot in an entry)
        assert [a.market for a in shapes] == expect["markets"]
    for field in ("max_retries", "num_nodes", "image", "envs"):
        if field in expect:
            assert getattr(spec, field) == expect[field]
    if "file_mounts" in expect:  # local sources relative to the test's folder
        made = {
            d: s if "://" in s else os.path.normpath(tmp_path / s)
            for d, s in expect["file_mounts"].items()
        }
        assert spec.file_mounts == made
    for field in ("disk_size_gib", "disk_tier", "image_id"):
        if field in expect:
            assert getattr(spec.resources, field) == expect[field]
    # What the server does with the spec the CLI sends (to_json): it reads back the same.
    assert load_job(json.loads(spec.to_json())) == spec
    planned = req.to_dict()
    for field, value in expect.get("requirements", {}).items():
        assert planned.get(field) == value, (field, planned)
