"""plan and launch name the dialect a job file is read in and, with --explain, each key's mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from spothop.jobs.dialect import Dialect, dialect_of, explain, file_dialect
from spothop.jobs.spec import load_job
from tests.jobs.test_spec_dstack import DSTACK_TASK


@pytest.mark.parametrize(
    ("data", "dialect"),
    [
        (
            {"run": "x", "resources": {"accelerators": ["L4:1", "A10G:1"], "memory": "8+"}},
            "spothop job",
        ),
        ({"run": "x", "resources": {"use_spot": False}}, "SkyPilot task"),
        ({"run": "x", "service": {}}, "SkyPilot task"),
        ({"type": "task", "commands": ["x"]}, "dstack task"),
        ([1, 2], "spothop job"),
    ],
)
def test_the_dialect_is_named(data: Any, dialect: str) -> None:
    assert dialect_of(data) == dialect


def test_explain_names_each_keys_field_and_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = {
        "name": "t",
        "run": "x",
        "resources": {"cloud": "aws", "accelerators": {"L4": 1, "A10G": 1}},
    }
    rows = explain(data, load_job(data))
    assert ("resources.cloud", "providers.allow", "['aws']") in rows
    assert ("resources.accelerators", "resources.any_of (alternatives)", "L4:1, A10G:1") in rows
    assert ("(market not given)", "market", "on-demand (SkyPilot's default)") in rows
    path = tmp_path / ".dstack.yml"
    path.write_text(DSTACK_TASK)
    dialect, raw = file_dialect(path)
    assert dialect is Dialect.DSTACK
    rows = explain(raw, load_job(path))
    assert ("nodes", "num_nodes", "2") in rows and ("spot_policy", "market", "auto") in rows


def test_plan_says_the_dialect_and_explains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spothop.cli.job_file import show_dialect

    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump({"run": "x", "resources": {"use_spot": True, "memory": "8+"}}))
    show_dialect(path, load_job(path), True, stderr=False)
    out, err = capsys.readouterr()
    assert "task.yaml: read as a SkyPilot task" in err
    assert "resources.use_spot" in out and "resources.memory_gib" in out


def test_explain_shows_each_mount_its_source_and_what_happens_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    sky = {
        "name": "m",
        "run": "x",
        "resources": {"use_spot": True},
        "file_mounts": {"/data": "data", "~/.cache/m": "s3://bucket/model"},
    }
    rows = explain(sky, load_job(sky))
    assert (
        "file_mounts./data",
        "file_mounts./data",
        f"{tmp_path / 'data'} (packed and uploaded at launch)",
    ) in rows
    assert (
        "file_mounts.~/.cache/m",
        "file_mounts.~/.cache/m",
        "s3://bucket/model (copied from its bucket at boot)",
    ) in rows
    path = tmp_path / ".dstack.yml"
    path.write_text("type: task\ncommands: [ls]\nfiles:\n  - data:/workflow/data\n  - data\n")
    _, raw = file_dialect(path)
    rows = explain(raw, load_job(path))
    assert (
        "files.0",
        "file_mounts./workflow/data",
        f"{tmp_path / 'data'} (packed and uploaded at launch)",
    ) in rows
    assert (
        "files.1",
        "file_mounts.data",
        f"{tmp_path / 'data'} (packed and uploaded at launch)",
    ) in rows


def test_explain_shows_ordered_alternatives_an_instance_type_and_a_machine_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    data = {
        "name": "o",
        "run": "x",
        "resources": {
            "cloud": "aws",
            "image_id": "ami-0123456789abcdef0",
            "ordered": [
                {"accelerators": "A100:1", "region": "us-east-1"},
                {"instance_type": "g5.xlarge"},
            ],
        },
    }
    rows = explain(data, load_job(data))
    assert (
        "resources.ordered",
        "resources.ordered (in preference order)",
        "A100:1 us-east-1, g5.xlarge",
    ) in rows
    assert (
        "resources.image_id",
        "resources.image_id (the cloud's machine image)",
        "ami-0123456789abcdef0",
    ) in rows
