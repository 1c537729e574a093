"""spothop.wire.logs: a log chunk's bounds, its bytes, and the names the launcher and the agent share."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from spothop.controlplane.bodies import body_model
from spothop.jobs import launcher
from spothop.wire.fields import wire_fields
from spothop.wire.logs import (
    ATTEMPT_ID_ENV,
    CHUNK_MAX_BYTES,
    NODE_RANK_ENV,
    LogChunk,
    worker_log_path,
)


def _chunk(raw: bytes, offset_bytes: int = 0) -> LogChunk:
    return LogChunk.of(raw, instance_id="i-1", attempt_id="a-1", offset_bytes=offset_bytes)


def test_a_chunk_carries_its_bytes_exactly_whatever_they_are() -> None:
    raw = "étape ✓".encode()[:-1] + b"\x00\x1b[2K\r\xff"  # a cut character, control bytes, junk
    chunk = _chunk(raw, offset_bytes=10)
    assert chunk.raw() == raw and chunk.end_bytes == 10 + len(raw)
    assert LogChunk.from_dict(chunk.to_dict()) == chunk
    assert len(_chunk(b"x" * CHUNK_MAX_BYTES).data) <= (CHUNK_MAX_BYTES + 2) // 3 * 4


@pytest.mark.parametrize("size", [0, CHUNK_MAX_BYTES + 1])
def test_a_chunk_holds_one_byte_to_the_maximum(size: int) -> None:
    with pytest.raises(ValueError, match="1 to 262144 bytes"):
        _chunk(b"x" * size)


def test_a_negative_offset_and_data_that_is_not_base64_are_refused() -> None:
    with pytest.raises(ValueError, match="offset_bytes"):
        _chunk(b"x", offset_bytes=-1)
    with pytest.raises(ValueError, match="not base64"):
        LogChunk("i-1", "a-1", 0, "not base64!").raw()
    with pytest.raises(ValueError, match="1 to"):
        LogChunk("i-1", "a-1", 0, base64.b64encode(b"x" * (CHUNK_MAX_BYTES + 1)).decode()).raw()


def test_the_servers_body_model_keeps_the_bounds() -> None:
    from pydantic import ValidationError

    model = body_model("LogChunkBody", wire_fields(LogChunk))
    good = _chunk(b"hello").to_dict()
    assert model(**good).model_dump() == good
    for bad in (
        {"offset_bytes": -1},
        {"data": ""},
        {"data": "A" * ((CHUNK_MAX_BYTES + 2) // 3 * 4 + 4)},
        {"attempt_id": ""},
        {"instance_id": "i" * 129},
    ):
        with pytest.raises(ValidationError):
            model(**{**good, **bad})


def test_the_launcher_and_the_agent_name_the_same_file_and_variables(tmp_path: Path) -> None:
    assert worker_log_path(tmp_path) == tmp_path / "worker.log"
    assert (launcher.ATTEMPT_ID_ENV, launcher.NODE_RANK_ENV) == (ATTEMPT_ID_ENV, NODE_RANK_ENV)
    boot = launcher.bootstrap(
        launcher.WorkerCommand(run="true"),
        job_id="j-1",
        node=0,
        attempt_id="a-1",
        provider="local",
        store_url="sqlite:///x.db",
        home=tmp_path,
    )
    state_dir = Path(boot.command[boot.command.index("--state-dir") + 1])
    assert boot.log_path == worker_log_path(state_dir)
    assert str(worker_log_path(state_dir)) in " ".join(boot.command)
