"""The durable tier on S3, through s3fs, against moto's server on a free local port (no network)."""

from __future__ import annotations

import socket
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
    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="ckpt")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield "s3://ckpt/run-1"
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
    assert restored is not None and restored.step == 2 and np.array_equal(restored.state["w"], weights)
    assert [i.step for i in list_checkpoints(s3_url)] == [1, 2]
    assert all(r.ok for r in verify_checkpoints(s3_url))
    detail = describe_checkpoint(s3_url)
    assert detail.checkpoint_id == delta.checkpoint_id and detail.chain == [full.checkpoint_id]
    assert detail.leaves[0].chunks_from_parents == detail.leaves[0].chunks - 1  # only the first chunk changed
