"""Reachable or refused: a plain path the job's instances cannot see is refused at launch.

An instance shares nothing with the controller but the network and the
provider's shared folders (``SharedStorage.bucket_paths``: the local cloud's
world ``buckets:``). A checkpoint, its replicas, a batch output or input that
is a plain path must lie in a shared folder of every provider the job may be
placed on; a real cloud (no ``SharedStorage``) shares none. Object-store URLs
are reachable from everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import StorageUnreachable
from spothop.jobs import check_reachable, load_job
from spothop.jobs.reachable import BUCKET_FIX, local_path, unshared_paths
from spothop.providers.extensions import SharedStorage
from spothop.providers.fake.provider import FakeProvider


class RealCloud:
    """A provider without SharedStorage, as every real cloud's adapter is."""


def _task(checkpoint: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": "j", "run": "python train.py", "checkpoint": checkpoint, **more}


def _batch(inputs: list[str], output: str) -> dict[str, Any]:
    return {
        "name": "b",
        "run": "python e.py",
        "kind": "batch",
        "batch": {"inputs": inputs, "output": output},
    }


def test_the_fake_provider_shares_the_folders_a_test_declares(tmp_path: Path) -> None:
    fake = FakeProvider(bucket_paths=[tmp_path / "bucket"])
    assert isinstance(fake, SharedStorage)
    assert list(fake.bucket_paths()) == [tmp_path / "bucket"]
    assert list(FakeProvider().bucket_paths()) == []  # none unless declared, as on a real cloud
    assert not isinstance(RealCloud(), SharedStorage)


def test_a_checkpoint_and_a_batch_inside_a_bucket_pass(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    (bucket / "data").mkdir(parents=True)
    (bucket / "data" / "a.jsonl").write_text("{}\n")
    providers = {"fake": FakeProvider(bucket_paths=[bucket])}
    task = load_job(_task({"url": f"file://{bucket}/ckpt"}), base_dir=tmp_path)
    check_reachable(task, providers)
    assert os.listdir(bucket / "ckpt") == []  # then probed as before
    batch = load_job(_batch(["bucket/data/*.jsonl"], "bucket/out"), base_dir=tmp_path)
    check_reachable(batch, providers)


def test_a_plain_path_outside_every_bucket_is_refused_naming_field_path_and_fix(
    tmp_path: Path,
) -> None:
    providers = {"fake": FakeProvider(bucket_paths=[tmp_path / "bucket"])}
    spec = load_job(_task({"url": "ckpt"}), base_dir=tmp_path)
    with pytest.raises(StorageUnreachable) as caught:
        check_reachable(spec, providers)
    [(field, message)] = caught.value.problems
    assert field == "checkpoint.url"
    assert str(tmp_path / "ckpt") in message and "fake" in message
    assert message.endswith(BUCKET_FIX) and "\n" not in message
    assert not (tmp_path / "ckpt").exists()  # refused before the probe made the folder


def test_every_unreachable_field_is_named_at_once(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.jsonl").write_text("{}\n")
    providers = {"fake": FakeProvider(bucket_paths=[tmp_path / "bucket"])}
    batch = load_job(_batch(["data/*.jsonl", "bucket/in.jsonl"], "out"), base_dir=tmp_path)
    assert [f for f, _ in unshared_paths(batch, providers)] == ["batch.output", "batch.inputs.0"]
    task = load_job(
        _task({"url": "bucket/ckpt", "replicas": {"eu-west-1": str(tmp_path / "eu")}}),
        base_dir=tmp_path,
    )
    assert [f for f, _ in unshared_paths(task, providers)] == ["checkpoint.replicas.eu-west-1"]


def test_an_object_store_url_is_reachable_from_every_provider(tmp_path: Path) -> None:
    providers = {"fake": FakeProvider(), "real": RealCloud()}
    spec = load_job(
        _task({"url": "s3://bucket/run", "replicas": {"europe-west4": "gs://eu/run"}}),
        base_dir=tmp_path,
    )
    assert unshared_paths(spec, providers) == []
    assert local_path("s3://bucket/run") is None
    assert local_path("file:///data/x") == Path("/data/x")
    assert local_path("/data/x") == Path("/data/x")


def test_a_provider_without_shared_storage_refuses_every_plain_path(tmp_path: Path) -> None:
    shared = FakeProvider(bucket_paths=[tmp_path])
    spec = load_job(_task({"url": "ckpt"}), base_dir=tmp_path)
    check_reachable(spec, {"fake": shared})
    with pytest.raises(StorageUnreachable, match=r"checkpoint\.url: .*instances of real cannot"):
        check_reachable(spec, {"fake": shared, "real": RealCloud()})


def test_only_the_providers_the_job_may_use_are_asked(tmp_path: Path) -> None:
    providers = {"fake": FakeProvider(bucket_paths=[tmp_path]), "real": RealCloud()}
    denied = load_job(_task({"url": "ckpt"}, providers={"deny": ["real"]}), base_dir=tmp_path)
    check_reachable(denied, providers)
    allowed = load_job(_task({"url": "ckpt"}, providers={"allow": ["fake"]}), base_dir=tmp_path)
    check_reachable(allowed, providers)


def test_a_symlink_out_of_a_bucket_is_not_in_it(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    (bucket / "away").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    spec = load_job(_task({"url": "bucket/away/ckpt"}), base_dir=tmp_path)
    [(field, _)] = unshared_paths(spec, {"fake": FakeProvider(bucket_paths=[bucket])})
    assert field == "checkpoint.url"


def test_launch_refuses_a_path_the_configured_providers_cannot_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.providers import registry
    from spothop.service.launch import check_launchable

    monkeypatch.setattr(registry, "default_providers", lambda: {"fake": FakeProvider()})
    spec = load_job(_task({"url": "ckpt"}), base_dir=tmp_path)
    with pytest.raises(StorageUnreachable, match=r"checkpoint\.url: .*put it in a bucket"):
        check_launchable(spec)
