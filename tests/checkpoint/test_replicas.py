"""Checkpoint replicas: copied in the background, manifest last; a restore reads its own region's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import Checkpointer, Tier
from spothop.checkpoint.errors import CheckpointConfigError
from spothop.checkpoint.reader import committed, manifest_path
from spothop.checkpoint.replicas import (
    PROVIDER_ENV,
    REGION_ENV,
    REPLICAS_ENV,
    ReplicaSet,
    read_restore_records,
    replicas_from_env,
)
from spothop.checkpoint.store import Store
from tests.checkpoint import counting_fs
from tests.checkpoint.counting_fs import reads_of
from tests.waiting import wait_for

PRIMARY = "countmem://primary/run"
REPLICAS = {"sim/r1": "countmem://r1/run", "r2": "countmem://r2/run"}


@pytest.fixture(autouse=True)
def _fresh_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    counting_fs.reset()
    monkeypatch.setenv(PROVIDER_ENV, "sim")
    monkeypatch.delenv(REPLICAS_ENV, raising=False)
    yield
    counting_fs.reset()


def _state(step: int) -> dict[str, object]:
    rng = np.random.default_rng(step)
    return {"w": rng.standard_normal((64, 64)).astype(np.float32), "step": step}


def _instance(
    tmp_path: Path, name: str, region: str, monkeypatch: pytest.MonkeyPatch
) -> Checkpointer:
    """A checkpointer as a fresh instance in ``region`` sees it: its own empty local disk."""
    monkeypatch.setenv(REGION_ENV, region)
    return Checkpointer(PRIMARY, local_url=str(tmp_path / name), replicas=REPLICAS)


def _train_and_replicate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps=(1,)) -> None:  # type: ignore[no-untyped-def]
    with _instance(tmp_path, "first", "r0", monkeypatch) as ckpt:
        for step in steps:
            ckpt.save(_state(step), step).wait()
    # close() waited for the background copies: every replica has committed the newest.
    for url in REPLICAS.values():
        assert [m.step for m in committed(Store(url))[0]] == list(steps)


def _restore(tmp_path: Path, name: str, region: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    counting_fs.READS.clear()
    with _instance(tmp_path, name, region, monkeypatch) as ckpt:
        return ckpt.restore()


def test_a_relaunched_instance_reads_the_replica_of_its_own_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _train_and_replicate(tmp_path, monkeypatch)
    restored = _restore(tmp_path, "relaunched", "r1", monkeypatch)
    assert restored is not None and restored.step == 1
    np.testing.assert_array_equal(restored.state["w"], _state(1)["w"])
    assert restored.url == "countmem://r1/run"
    assert reads_of("r1", data_only=True) > 0
    assert reads_of("primary", data_only=True) == 0
    assert reads_of("r2", data_only=True) == 0
    (record,) = read_restore_records(PRIMARY)
    assert record.served_by == "sim/r1"
    assert record.own_replica == "sim/r1"
    assert record.from_own_region is True
    assert (record.provider, record.region, record.step) == ("sim", "r1", 1)
    assert record.seconds > 0
    assert record.state_bytes == 64 * 64 * 4


def test_a_region_key_without_provider_matches_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _train_and_replicate(tmp_path, monkeypatch)
    restored = _restore(tmp_path, "relaunched", "r2", monkeypatch)
    assert restored is not None and restored.url == "countmem://r2/run"
    assert reads_of("r2", data_only=True) > 0 and reads_of("r1", data_only=True) == 0


def test_a_corrupt_own_replica_falls_back_to_another_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _train_and_replicate(tmp_path, monkeypatch)
    (manifest,) = committed(Store(REPLICAS["sim/r1"]))[0]
    pack = f"/r1/run/{manifest.files[0].path}"
    data = bytearray(counting_fs.read_bytes(pack))
    data[len(data) // 2] ^= 0xFF
    counting_fs.write_bytes(pack, bytes(data))
    restored = _restore(tmp_path, "relaunched", "r1", monkeypatch)
    assert restored is not None and restored.step == 1
    np.testing.assert_array_equal(restored.state["w"], _state(1)["w"])
    assert restored.url == "countmem://r2/run"
    assert reads_of("r1", data_only=True) > 0  # it was tried first
    (record,) = read_restore_records(PRIMARY)
    assert record.served_by == "r2" and record.from_own_region is False


def test_a_missing_own_replica_falls_back_and_a_partial_one_is_never_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _train_and_replicate(tmp_path, monkeypatch)
    for url in REPLICAS.values():
        store = Store(url)
        (manifest,) = committed(store)[0]
        # A copy cut off before its commit: the data files are there, the manifest is not.
        store.remove(manifest_path(manifest.checkpoint_id))
    restored = _restore(tmp_path, "relaunched", "r1", monkeypatch)
    assert restored is not None and restored.url == PRIMARY
    assert reads_of("r1", data_only=True) == 0 and reads_of("r2", data_only=True) == 0
    assert read_restore_records(PRIMARY)[-1].served_by == "primary"


def test_a_replica_behind_never_takes_the_restore_back_a_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _train_and_replicate(tmp_path, monkeypatch)
    monkeypatch.setenv(REGION_ENV, "r0")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the replica's folder belongs")
    replicas = {"sim/r1": str(blocked / "run"), "r2": REPLICAS["r2"]}
    with Checkpointer(PRIMARY, local_url=str(tmp_path / "second"), replicas=replicas) as ckpt:
        ckpt.save(_state(2), 2).wait()
        ckpt.replicas.wait()
        stats = ckpt.replicas.replicator.stats  # type: ignore[union-attr]
        assert [f[0] for f in stats.failures] == ["sim/r1"]
    # r1 never got step 2; the instance in r1 still restores step 2, from where it is.
    monkeypatch.setenv(REGION_ENV, "r1")
    restored = _restore(tmp_path, "third", "r1", monkeypatch)
    assert restored is not None and restored.step == 2
    assert restored.url == "countmem://r2/run"


def test_an_emergency_delta_is_replicated_with_its_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REGION_ENV, "r0")
    with Checkpointer(PRIMARY, local_url=str(tmp_path / "a"), replicas=REPLICAS) as ckpt:
        state = _state(1)
        ckpt.save(state, 1).wait()
        state["w"][0, :8] += 1.0  # type: ignore[index]
        ckpt.save(state, 2, tier=Tier.EMERGENCY).wait()
    tiers = [(m.step, m.tier) for m in committed(Store(REPLICAS["sim/r1"]))[0]]
    assert tiers == [(1, Tier.DURABLE), (2, Tier.EMERGENCY)]
    restored = _restore(tmp_path, "b", "r1", monkeypatch)
    assert restored is not None and restored.step == 2
    assert restored.url == "countmem://r1/run"
    np.testing.assert_array_equal(restored.state["w"], state["w"])
    assert reads_of("primary", data_only=True) == 0


def test_replicas_keep_as_many_chains_as_the_primary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REGION_ENV, "r0")
    with Checkpointer(
        PRIMARY, local_url=str(tmp_path / "a"), replicas=REPLICAS, keep_chains=2
    ) as ckpt:
        for step in range(1, 6):
            ckpt.save(_state(step), step).wait()
    for url in (PRIMARY, *REPLICAS.values()):
        assert [m.step for m in committed(Store(url))[0]] == [4, 5]


def test_the_replicas_come_from_the_launchers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REPLICAS_ENV, '{"r2": "countmem://r2/run"}')
    monkeypatch.setenv(REGION_ENV, "r2")
    with Checkpointer(PRIMARY, local_url=str(tmp_path / "a")) as ckpt:
        ckpt.save(_state(1), 1).wait()
    assert [m.step for m in committed(Store("countmem://r2/run"))[0]] == [1]


def test_without_replicas_nothing_is_added_to_the_store(tmp_path: Path) -> None:
    with Checkpointer(str(tmp_path / "ckpt"), local_url=str(tmp_path / "local")) as ckpt:
        ckpt.save(_state(1), 1).wait()
    with Checkpointer(str(tmp_path / "ckpt"), local_url=str(tmp_path / "fresh")) as ckpt:
        assert ckpt.restore() is not None
    assert read_restore_records(str(tmp_path / "ckpt")) == []
    assert all(p.is_dir() for p in (tmp_path / "ckpt").iterdir())


def test_nearest_puts_the_own_region_first_then_the_same_provider() -> None:
    places = ReplicaSet(
        {"b/r1": "u1", "a/r2": "u2", "r3": "u3", "a/r9": "u9", "a/r1": "u0"}, "a", "r1"
    )
    assert places.own == "a/r1"
    assert [k for k, _ in places.nearest()] == ["a/r1", "a/r2", "a/r9", "b/r1", "r3"]
    assert ReplicaSet({"r1": "u"}, None, None).own is None


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '{"r1": 3}', '{"": "u"}'])
def test_a_malformed_replicas_variable_is_a_clear_error(raw: str) -> None:
    with pytest.raises(CheckpointConfigError, match=REPLICAS_ENV):
        replicas_from_env({REPLICAS_ENV: raw})
    assert replicas_from_env({}) == {}


def test_a_stop_request_does_not_wait_for_copies_to_the_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = tmp_path / "control"
    control.mkdir()
    monkeypatch.setenv("SPOTHOP_AGENT_DIR", str(control))
    monkeypatch.setenv(REGION_ENV, "r0")
    counting_fs.REPLICATION_GATE.clear()  # the copy is in flight, reading the primary
    ckpt = Checkpointer(PRIMARY, local_url=str(tmp_path / "a"), replicas=REPLICAS)
    ckpt.save(_state(1), 1).wait()  # committed in the primary
    (control / "stop.json").write_text('{"deadline_unix_s": 0}')  # the agent's final notice
    replicator = ckpt.replicas.replicator
    assert replicator is not None

    def open_gate_once_abandoned() -> None:
        wait_for(replicator._stop.is_set, 10, what="close() to abandon the copies")
        counting_fs.REPLICATION_GATE.set()

    opener = threading.Thread(target=open_gate_once_abandoned)
    opener.start()
    ckpt.close()
    opener.join()
    assert [m.step for m in committed(Store(PRIMARY))[0]] == [1]
    for url in REPLICAS.values():  # no replica committed it: a cut-off copy leaves no manifest
        assert committed(Store(url))[0] == []
    assert any("stopped" in why for _, _, why in replicator.stats.failures)


def test_every_rank_restores_the_same_step_from_its_own_regions_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.checkpoint.manifest import WorldLayout

    def ranks(region: str, disk: str) -> list[Checkpointer]:
        monkeypatch.setenv(REGION_ENV, region)
        return [
            Checkpointer(
                PRIMARY,
                local_url=str(tmp_path / disk),
                replicas=REPLICAS,
                world=WorldLayout(world_size=2, rank=r),
            )
            for r in range(2)
        ]

    first = ranks("r0", "a")
    for ckpt in first:
        ckpt.save(_state(10 + ckpt.world.rank), 5).wait()
    for ckpt in first:
        ckpt.close()
    counting_fs.READS.clear()
    second = ranks("r1", "b")
    restored = [ckpt.restore() for ckpt in second]
    for ckpt in second:
        ckpt.close()
    assert [r.step for r in restored if r is not None] == [5, 5]
    assert [r.url for r in restored if r is not None] == [
        "countmem://r1/run/rank-00000",
        "countmem://r1/run/rank-00001",
    ]
    for rank, r in enumerate(restored):
        assert r is not None
        np.testing.assert_array_equal(r.state["w"], _state(10 + rank)["w"])
    assert reads_of("primary", data_only=True) == 0
    records = read_restore_records(PRIMARY)
    assert sorted((rec.rank, rec.served_by) for rec in records) == [(0, "sim/r1"), (1, "sim/r1")]


def test_a_delta_only_the_primary_has_reads_its_base_from_the_own_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REGION_ENV, "r0")
    # 4 KiB chunks: the delta rewrites the one chunk that changed and points at the rest.
    with Checkpointer(
        PRIMARY, local_url=str(tmp_path / "a"), replicas=REPLICAS, chunk_bytes=4096
    ) as ckpt:
        state = _state(1)
        ckpt.save(state, 1).wait()
        state["w"][0, :8] += 1.0  # type: ignore[index]
        delta = ckpt.save(state, 2, tier=Tier.EMERGENCY).wait()
    # The notice's copies were cut off: no replica committed the emergency delta.
    for url in REPLICAS.values():
        Store(url).remove(manifest_path(delta.checkpoint_id))
    base_files = [f.path for f in committed(Store(PRIMARY))[0][0].files]
    restored = _restore(tmp_path, "b", "r1", monkeypatch)
    assert restored is not None and restored.step == 2
    np.testing.assert_array_equal(restored.state["w"], state["w"])
    # Manifests are read everywhere (every store is listed); data only where it is nearest.
    primary_reads = [
        p
        for p in counting_fs.READS
        if p.startswith("/primary/run/step-") and not p.endswith("MANIFEST.json")
    ]
    assert primary_reads and all(delta.checkpoint_id in p for p in primary_reads)
    assert not any(f in p for f in base_files for p in primary_reads)  # the base came from r1
    assert reads_of("r1", data_only=True) >= len(base_files)
    assert reads_of("r2", data_only=True) == 0
    record = read_restore_records(PRIMARY)[-1]
    assert set(record.files_by_store) == {"sim/r1", "primary"}
    assert record.served_by == "sim/r1" and record.from_own_region is True
