"""Before launch: an unwritable checkpoint or output URL, or an input that matches nothing, is refused."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import JobSpecError, StorageUnreachable
from spothop.jobs import check_reachable, load_job


def _batch(tmp_path: Path, **batch: Any) -> dict[str, Any]:
    fields = {"inputs": ["data/*.jsonl"], "output": "out", **batch}
    return {"name": "j", "run": "python e.py", "kind": "batch", "batch": fields}


def test_a_writable_folder_and_matching_inputs_pass_and_leave_nothing_behind(
    tmp_path: Path,
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text("{}\n")
    spec = load_job({**_batch(tmp_path), "checkpoint": {"url": "ckpt"}}, base_dir=tmp_path)
    check_reachable(spec)
    assert sorted(os.listdir(tmp_path / "out")) == [] and os.listdir(tmp_path / "ckpt") == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission")
def test_an_unwritable_checkpoint_folder_is_refused_naming_the_field(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        spec = load_job(
            {"name": "j", "run": "x", "checkpoint": {"url": "locked/ckpt"}}, base_dir=tmp_path
        )
        with pytest.raises(StorageUnreachable, match=r"checkpoint\.url: cannot write to") as caught:
            check_reachable(spec)
        assert caught.value.problems[0][0] == "checkpoint.url"
    finally:
        locked.chmod(0o700)


def test_an_output_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text("{}\n")
    (tmp_path / "file").write_text("not a folder")
    spec = load_job(_batch(tmp_path, output="file/out"), base_dir=tmp_path)
    with pytest.raises(StorageUnreachable, match=r"batch\.output: cannot write to"):
        check_reachable(spec)


def test_an_input_that_matches_no_file_is_named(tmp_path: Path) -> None:
    spec = load_job(_batch(tmp_path, inputs=["data/*.jsonl", "one.jsonl"]), base_dir=tmp_path)
    with pytest.raises(JobSpecError) as caught:
        check_reachable(spec)
    assert [p for p, _ in caught.value.problems] == ["batch.inputs.0", "batch.inputs.1"]
    assert "matches no file" in str(caught.value)


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    boto3 = pytest.importorskip("boto3")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    bucket = f"ckpt-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield bucket
    finally:
        server.stop()


def test_an_object_store_url_is_probed_and_a_missing_bucket_refused(s3_bucket: str) -> None:
    import s3fs

    good = load_job({"name": "j", "run": "x", "checkpoint": {"url": f"s3://{s3_bucket}/run"}})
    check_reachable(good)
    assert s3fs.S3FileSystem().ls(f"{s3_bucket}") == []  # the probe is gone
    bad = load_job({"name": "j", "run": "x", "checkpoint": {"url": "s3://no-such-bucket-x/run"}})
    with pytest.raises(StorageUnreachable, match=r"checkpoint\.url: cannot write to 's3://no-such"):
        check_reachable(bad)
