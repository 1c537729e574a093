"""Corrupt, partial and unreadable checkpoints are skipped with a reason; bad locations fail clearly."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import (
    Checkpointer,
    CheckpointWriteError,
    FormatVersionError,
    NoValidCheckpoint,
    Tier,
    list_checkpoints,
    verify_checkpoints,
)
from spothop.checkpoint.manifest import manifest_from_json


def two_checkpoints(url: str) -> tuple[Checkpointer, list[str]]:
    ckpt = Checkpointer(url, chunk_bytes=256)
    ids = []
    for step in (1, 2):
        ids.append(
            ckpt.save({"w": np.full(300, step, dtype=np.float32), "step": step}, step)
            .wait()
            .checkpoint_id
        )
    return ckpt, ids


def pack(root: Path, cid: str) -> Path:
    return root / cid / "data-00000.pack"


@pytest.mark.parametrize(
    "damage", ["truncate", "flip", "manifest_flip", "no_manifest", "delete_pack"]
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, (older, newest) = two_checkpoints(str(tmp_path))
    data = pack(tmp_path, newest)
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:-7])
    elif damage == "flip":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x10
        data.write_bytes(bytes(raw))
    elif damage == "manifest_flip":
        manifest = tmp_path / newest / "MANIFEST.json"
        manifest.write_text(manifest.read_text().replace('"step": 2', '"step": 3'))
    elif damage == "no_manifest":
        (tmp_path / newest / "MANIFEST.json").unlink()
    else:
        data.unlink()
    older_bytes = pack(tmp_path, older).read_bytes()
    with caplog.at_level(logging.WARNING, "spothop.checkpoint"):
        restored = Checkpointer(str(tmp_path)).restore()
    assert restored is not None and restored.manifest.checkpoint_id == older
    assert restored.state["step"] == 1 and np.all(restored.state["w"] == 1)
    assert pack(tmp_path, older).read_bytes() == older_bytes
    if (
        damage != "no_manifest"
    ):  # a folder without a manifest is not a checkpoint: nothing to report
        assert newest in caplog.text


def test_verify_names_the_broken_checkpoint(tmp_path: Path) -> None:
    _, (older, newest) = two_checkpoints(str(tmp_path))
    pack(tmp_path, newest).write_bytes(b"garbage")
    results = {r.checkpoint_id: r for r in verify_checkpoints(str(tmp_path))}
    assert results[older].ok
    assert not results[newest].ok and "bytes" in (results[newest].reason or "")


def test_a_delta_whose_parent_is_gone_is_skipped(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path / "d"), keep_chains=5)
    base = ckpt.save({"w": np.zeros(10)}, 1).wait()
    ckpt.save({"w": np.ones(10)}, 2).wait()
    delta = ckpt.save({"w": np.full(10, 2.0)}, 3, tier=Tier.EMERGENCY).wait()
    assert delta.parent is not None and delta.parent != base.checkpoint_id
    import shutil

    shutil.rmtree(tmp_path / "d" / delta.parent)
    restored = Checkpointer(str(tmp_path / "d")).restore()
    assert restored is not None and restored.manifest.checkpoint_id == base.checkpoint_id


def test_a_manifest_from_a_newer_format_is_refused_clearly(tmp_path: Path) -> None:
    _, (older, newest) = two_checkpoints(str(tmp_path))
    path = tmp_path / newest / "MANIFEST.json"
    outer = json.loads(path.read_text())
    outer["manifest"]["format_version"] = 99
    path.write_text(json.dumps(outer))
    with pytest.raises(FormatVersionError, match="upgrade spothop"):
        manifest_from_json(path.read_text(), newest)
    restored = Checkpointer(str(tmp_path)).restore()
    assert restored is not None and restored.manifest.checkpoint_id == older


def test_all_bad_raises_with_every_reason(tmp_path: Path) -> None:
    _, ids = two_checkpoints(str(tmp_path))
    for cid in ids:
        pack(tmp_path, cid).write_bytes(b"")
    with pytest.raises(NoValidCheckpoint) as info:
        Checkpointer(str(tmp_path)).restore()
    assert {cid for cid, _ in info.value.reasons} == set(ids)


def test_nothing_saved_restores_to_none(tmp_path: Path) -> None:
    assert Checkpointer(str(tmp_path / "empty")).restore() is None


def test_unwritable_location_fails_clearly_and_keeps_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    ckpt = Checkpointer(str(blocker / "ckpt"))
    with pytest.raises(CheckpointWriteError, match="cannot write"):
        ckpt.save({"w": np.zeros(3)}, 1).wait()


@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("needs permission to mount a size-limited tmpfs")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("tier", [Tier.DURABLE, Tier.EMERGENCY, Tier.LOCAL])
def test_a_full_disk_fails_the_save_and_leaves_earlier_checkpoints_intact(
    tiny_disk: Path, tier: Tier
) -> None:
    durable, local = tiny_disk / "durable", tiny_disk / "local"
    ckpt = Checkpointer(
        str(durable), local_url=str(local), keep_chains=5, keep_local=5, chunk_bytes=16 * 1024
    )
    small = {"w": np.zeros(20_000, dtype=np.float32)}  # 80 kB raw (local), far less compressed
    first = ckpt.save(small, 1, tier=Tier.LOCAL if tier is Tier.LOCAL else Tier.DURABLE).wait()
    folder = local if tier is Tier.LOCAL else durable
    before = list_checkpoints(str(folder))
    with pytest.raises(
        CheckpointWriteError, match="disk is full"
    ):  # many chunks: workers fail mid-file
        ckpt.save(
            {"w": np.random.default_rng(0).random(100_000).astype(np.float32)}, 2, tier=tier
        ).wait()
    after = list_checkpoints(str(folder))
    assert (
        [i.checkpoint_id for i in after]
        == [i.checkpoint_id for i in before]
        == [first.checkpoint_id]
    )
    assert not [
        p for p in folder.iterdir() if p.name.startswith("step-000000000002")
    ]  # nothing half-written left
    restored = Checkpointer(str(durable), local_url=str(local)).restore()
    assert restored is not None and restored.step == 1


def test_state_that_cannot_be_stored_is_refused_before_writing(tmp_path: Path) -> None:
    from spothop.checkpoint import CheckpointConfigError

    with pytest.raises(CheckpointConfigError, match="'/fn'"):
        Checkpointer(str(tmp_path)).save({"fn": print}, 1)
    assert list_checkpoints(str(tmp_path)) == []


def test_the_package_imports_without_torch() -> None:
    code = "import sys, spothop.checkpoint, spothop.cli.ckpt; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
