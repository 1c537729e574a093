"""The durable tier on S3, through s3fs, against moto's server on a free local port (no network)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

moto_server = pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
boto3 = pytest.importorskip("boto3")

from spothop.checkpoint import (  # noqa: E402
    Checkpointer,
    Tier,
    describe_checkpoint,
    list_checkpoints,
    verify_checkpoints,
)


@pytest.fixture
def s3_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
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
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="ckpt")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        # moto keeps its buckets in process-wide state, across servers: each test gets its own prefix.
        yield f"s3://ckpt/run-{uuid.uuid4().hex[:8]}"
    finally:
        server.stop()


def test_save_delta_restore_and_verify_on_s3(s3_url: str) -> None:
    ckpt = Checkpointer(s3_url, chunk_bytes=4096)
    weights = np.random.default_rng(0).random(10_000)
    full = ckpt.save({"w": weights}, 1).wait()
    weights[:10] = 0.0
    delta = ckpt.save({"w": weights}, 2, tier=Tier.EMERGENCY).wait()
    assert delta.parent == full.checkpoint_id and delta.size_bytes < full.size_bytes
    restored = Checkpointer(s3_url).restore()
    assert (
        restored is not None and restored.step == 2 and np.array_equal(restored.state["w"], weights)
    )
    assert [i.step for i in list_checkpoints(s3_url)] == [1, 2]
    assert all(r.ok for r in verify_checkpoints(s3_url))
    detail = describe_checkpoint(s3_url)
    assert detail.checkpoint_id == delta.checkpoint_id and detail.chain == [full.checkpoint_id]
    assert (
        detail.leaves[0].chunks_from_parents == detail.leaves[0].chunks - 1
    )  # only the first chunk changed


def test_a_large_save_goes_up_as_several_streams_and_reads_back_whole(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.checkpoint import pack

    monkeypatch.setattr(pack, "MIN_STREAM_BYTES", 16 * 1024)  # small state, several streams
    rng = np.random.default_rng(1)
    state = {f"layer{i}": rng.random(3000) for i in range(12)}  # 12 × 24 kB
    ckpt = Checkpointer(s3_url, chunk_bytes=4096, upload_streams=3)
    full = ckpt.save(state, 1).wait()
    assert [f.path.rsplit("/", 1)[1] for f in full.files] == [
        "data-00000.pack",
        "data-00001.pack",
        "data-00002.pack",
    ]
    assert sum(f.size_bytes for f in full.files) == full.size_bytes > 0
    assert list(full.leaves) == [
        f"/layer{i}" for i in range(12)
    ]  # the state's order, whatever the streams
    state["layer11"] = state["layer11"] + 1  # a delta whose parent chunks sit in three files
    delta = ckpt.save(state, 2, tier=Tier.EMERGENCY).wait()
    assert (
        delta.parent == full.checkpoint_id and len(delta.files) == 1
    )  # one changed leaf: one stream
    restored = Checkpointer(s3_url).restore(apply_rng=False)
    assert restored is not None and restored.step == 2
    assert all(np.array_equal(restored.state[k], v) for k, v in state.items())
    assert all(r.ok for r in verify_checkpoints(s3_url))


def test_a_failing_stream_fails_the_save_and_leaves_no_checkpoint(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.checkpoint import CheckpointWriteError, pack

    monkeypatch.setattr(pack, "MIN_STREAM_BYTES", 16 * 1024)
    real = pack.write_pack

    def second_fails(store, relative, *args, **kwargs):  # type: ignore[no-untyped-def]
        if relative.endswith("data-00001.pack"):
            raise OSError(28, "No space left on device")
        return real(store, relative, *args, **kwargs)

    monkeypatch.setattr(pack, "write_pack", second_fails)
    ckpt = Checkpointer(s3_url, chunk_bytes=4096, upload_streams=3)
    with pytest.raises(CheckpointWriteError, match="No space left"):
        ckpt.save({f"l{i}": np.ones(3000) * i for i in range(12)}, 1).wait()
    assert list_checkpoints(s3_url) == []


def test_an_empty_prefix_lists_nothing_and_a_missing_bucket_is_not_found(s3_url: str) -> None:
    from spothop.errors import NotFoundError

    assert list_checkpoints(s3_url) == []  # a prefix exists only while objects are under it
    with pytest.raises(NotFoundError, match="bucket that does not exist"):
        list_checkpoints(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/run")
