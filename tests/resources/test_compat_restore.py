"""Recovery consults the matrix: a checkpoint records its GPU, and a GPU the matrix refuses falls back."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import Checkpointer
from spothop.checkpoint.errors import CheckpointConfigError, NoValidCheckpoint
from spothop.checkpoint.hardware import COMPAT_ENV, GPU_ENV, HardwareCheck, need_from_env, this_gpu
from spothop.checkpoint.manifest import ChunkRef, Codec, LeafEntry
from spothop.checkpoint.reader import committed
from spothop.checkpoint.store import Store


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (GPU_ENV, COMPAT_ENV, "SPOTHOP_CHECKPOINT_REPLICAS"):
        monkeypatch.delenv(name, raising=False)


def _save(tmp_path: Path, gpu: str | None, step: int, disk: str) -> None:
    with Checkpointer(str(tmp_path / "ckpt"), local_url=str(tmp_path / disk), gpu=gpu) as ckpt:
        ckpt.save({"w": np.full(1024, float(step))}, step).wait()


def _restore(tmp_path: Path, gpu: str | None, disk: str):  # type: ignore[no-untyped-def]
    with Checkpointer(str(tmp_path / "ckpt"), local_url=str(tmp_path / disk), gpu=gpu) as ckpt:
        return ckpt.restore()


def test_a_save_records_the_gpu_it_was_made_on(tmp_path: Path) -> None:
    _save(tmp_path, "nvidia-h100-sxm5-80gb", 1, "a")
    (manifest,) = committed(Store(str(tmp_path / "ckpt")))[0]
    assert manifest.made_on == {"gpu": "H100-SXM5-80GB"}


def test_a_gpu_the_matrix_refuses_does_not_restore_with_the_matrix_reason(tmp_path: Path) -> None:
    _save(tmp_path, "H100-SXM5-80GB", 1, "a")
    with pytest.raises(NoValidCheckpoint) as refused:
        _restore(tmp_path, "V100-SXM2-16GB", "b")
    assert (
        "H100-SXM5-80GB → V100-SXM2-16GB: architecture Volta is older than the checkpoint's Hopper"
        in str(refused.value)
    )
    restored = _restore(tmp_path, "H200-SXM-141GB", "c")
    assert restored is not None and restored.step == 1


def test_the_restore_falls_back_to_an_older_checkpoint_this_gpu_may_take(tmp_path: Path) -> None:
    _save(tmp_path, "A100-SXM4-80GB", 1, "a")
    _save(tmp_path, "H100-SXM5-80GB", 2, "b")
    restored = _restore(tmp_path, "A100-SXM4-80GB", "c")
    assert restored is not None and restored.step == 1
    assert float(restored.state["w"][0]) == 1.0


def test_the_jobs_declared_need_comes_from_the_launchers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(tmp_path, "H100-SXM5-80GB", 1, "a")
    monkeypatch.setenv(COMPAT_ENV, json.dumps({"min_architecture": "Ampere"}))
    restored = _restore(tmp_path, "A100-SXM4-40GB", "b")
    assert restored is not None and restored.step == 1
    monkeypatch.setenv(COMPAT_ENV, json.dumps({"state_memory_gib": 60}))
    with pytest.raises(NoValidCheckpoint, match=r"40 GiB per GPU is less than the 60\.0 GiB"):
        _restore(tmp_path, "A100-SXM4-40GB", "c")


def test_the_state_size_in_the_manifest_is_a_memory_need(tmp_path: Path) -> None:
    _save(tmp_path, "A100-SXM4-80GB", 1, "a")
    (manifest,) = committed(Store(str(tmp_path / "ckpt")))[0]
    assert HardwareCheck("A10G").refusal(manifest) is None  # 8 KiB of state fits anywhere
    gib = 1024**3
    chunk = ChunkRef("big/pack-0", 0, 1, 30 * gib, "0" * 64, Codec.RAW)
    big = replace(manifest, leaves={"w": LeafEntry("numpy", "uint8", (30 * gib,), (chunk,))})
    assert HardwareCheck("A10G").refusal(big) == (
        "A100-SXM4-80GB → A10G: 24 GiB per GPU is less than the 30.0 GiB of state per GPU"
    )
    assert HardwareCheck("A100-SXM4-40GB").refusal(big) is None


def test_an_unknown_gpu_checks_nothing(tmp_path: Path) -> None:
    _save(tmp_path, None, 1, "a")
    (manifest,) = committed(Store(str(tmp_path / "ckpt")))[0]
    assert manifest.made_on == {}
    restored = _restore(tmp_path, "K80", "b")
    assert restored is not None
    _save(tmp_path, "B200", 2, "c")
    assert _restore(tmp_path, None, "d").step == 2  # type: ignore[union-attr]


def test_the_gpu_and_need_come_from_the_environment() -> None:
    assert this_gpu(environ={GPU_ENV: "nvidia-a100-sxm4-40gb"}) == "A100-SXM4-40GB"
    assert this_gpu(environ={GPU_ENV: "not-a-gpu-at-all"}) is None
    assert this_gpu(environ={}) is None or isinstance(this_gpu(environ={}), str)
    need = need_from_env({COMPAT_ENV: '{"min_compute_capability": "8.0"}'})
    assert need.min_compute_capability == "8.0"
    for bad in ("[1]", "nope", '{"min_compute_capability": "8"}'):
        with pytest.raises(CheckpointConfigError, match=COMPAT_ENV):
            need_from_env({COMPAT_ENV: bad})


def test_a_job_that_did_not_opt_in_is_not_checked_under_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(tmp_path, "H100-SXM5-80GB", 1, "a")
    monkeypatch.setenv(
        GPU_ENV, "V100-SXM2-16GB"
    )  # the launcher's GPU, no $SPOTHOP_CHECKPOINT_COMPAT
    restored = _restore(tmp_path, None, "b")
    assert restored is not None and restored.step == 1
    monkeypatch.setenv(COMPAT_ENV, "{}")  # opted in: the matrix's own rules
    with pytest.raises(NoValidCheckpoint, match="architecture Volta is older"):
        _restore(tmp_path, None, "c")
