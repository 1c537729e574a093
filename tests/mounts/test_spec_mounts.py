"""``file_mounts`` in a job spec: destinations a node can take, sources that exist, each problem
naming its mount."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import JobSpecError
from spothop.jobs.spec import JobSpec, load_job


def _job(tmp_path: Path, mounts: object) -> JobSpec:
    return load_job({"name": "m", "run": "true", "file_mounts": mounts}, base_dir=tmp_path)


def test_local_sources_are_the_job_files_and_urls_stay(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "cfg.yaml").write_text("a: 1\n")
    spec = _job(tmp_path, {"/data": "data", "~/cfg.yaml": "./cfg.yaml", "in": "s3://b/in"})
    assert spec.file_mounts == {
        "/data": str(tmp_path / "data"),
        "~/cfg.yaml": str(tmp_path / "cfg.yaml"),
        "in": "s3://b/in",
    }
    assert JobSpec.from_json(spec.to_json()).file_mounts == spec.file_mounts


@pytest.mark.parametrize(
    ("mounts", "words"),
    [
        ({"/data": "missing"}, "'/data': the source"),
        ({"/a/../etc": "s3://b"}, "climbs out"),
        ({"/": "s3://b"}, "root"),
        ({"": "s3://b"}, "empty destination"),
        ({"s3://b/x": "s3://b"}, "not a URL"),
        ({"/d": None}, "'/d': the source is None"),
        ({"/d": "s3://b", "/d/": "s3://c"}, "the same destination"),
        (["/d"], "a mapping {DEST: SOURCE}"),
    ],
)
def test_a_bad_mount_is_named(tmp_path: Path, mounts: object, words: str) -> None:
    with pytest.raises(JobSpecError, match="file_mounts") as caught:
        _job(tmp_path, mounts)
    assert words in str(caught.value)


def test_a_skypilot_files_relative_source_is_the_current_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path)
    spec = load_job(
        {
            "resources": {"use_spot": True},
            "run": "true",
            "name": "sky",
            "file_mounts": {"/d": "here", "/m": {"source": "gs://b/m", "mode": "MOUNT_CACHED"}},
        }
    )
    assert spec.file_mounts == {"/d": str(tmp_path / "here"), "/m": "gs://b/m"}
