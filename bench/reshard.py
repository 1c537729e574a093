"""Re-sharding benchmark: restoring into another world size against restoring into the same one.

    .venv/bin/python -m bench.reshard --replicated-mib 64 --sharded-mib 64 --old 2 --new 1 3 4

A state of float32 torch tensors (4 MiB each): ``--replicated-mib`` replicated (a model and
its replicated optimizer state) and ``--sharded-mib`` split along dim 0 over the ``--old``
ranks (a rank-sharded optimizer state, ``Shard(rule="padded")``). The old world saves once
(durable tier, a folder). Then, one new rank at a time in this process, it measures:

* the same-world restore of old rank 0 (the baseline: one part read and verified);
* for each ``--new`` world size, every new rank's re-sharded restore: its seconds, and the
  bytes of the data files it read (each verified whole: old rank 0's for the replicated state,
  and those of the other old ranks whose rows it needs) as a multiple of its own state's bytes.

Prints one table; medians over ``--repeat`` rounds. Wall-clock on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import IO

import torch

from spothop.checkpoint import Checkpointer, FixedInterval, Shard, ShardRule, Tier, WorldLayout
from spothop.checkpoint.reshard import new_range
from spothop.checkpoint.store import Store

TENSOR_MIB = 4
FLOATS_PER_MIB = 1024 * 1024 // 4


def _tensors(mib: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    count = max(1, mib // TENSOR_MIB)
    return [torch.randn(TENSOR_MIB * FLOATS_PER_MIB, generator=generator) for _ in range(count)]


def _checkpointer(url: str, world: int, rank: int) -> Checkpointer:
    return Checkpointer(
        url,
        local_url=f"{url}-local",
        world=WorldLayout(world_size=world, rank=rank),
        interval=FixedInterval(1e9),
        zstd_levels={Tier.DURABLE: None},
    )


def _save_old(url: str, old: int, replicated: list[torch.Tensor], sharded: torch.Tensor) -> None:
    rows = sharded.shape[0]
    shard = Shard(rule=ShardRule.PADDED, length=rows)
    for rank in range(old):
        start, stop = new_range(shard, rows, old, rank, "opt")
        part = torch.zeros(stop - start, sharded.shape[1])
        real = sharded[start : min(stop, rows)]
        part[: real.shape[0]] = real
        state = {"model": replicated, "opt": part}
        with _checkpointer(url, old, rank) as ckpt:
            ckpt.save(state, 100, sharded={"opt": shard}).wait()


_opened: list[int] = []  # sizes of the data files each restore opened


def _count_reads() -> None:
    """Record the size of every data file a restore opens (manifests are read with ``read``)."""
    original = Store.open_read

    def counting(self: Store, relative: str) -> IO[bytes]:
        _opened.append(int(self.fs.size(self.path(relative))))
        return original(self, relative)

    Store.open_read = counting  # type: ignore[method-assign]


def _restore(url: str, world: int, rank: int) -> tuple[float, float]:
    """Seconds, and the bytes of the files read as a multiple of the state restored."""
    _opened.clear()
    with _checkpointer(url, world, rank) as ckpt:
        start = time.perf_counter()
        restored = ckpt.restore(apply_rng=False)
        seconds = time.perf_counter() - start
    assert restored is not None
    state_bytes = sum(t.numel() * 4 for t in restored.state["model"]) + (
        restored.state["opt"].numel() * 4
    )
    return seconds, sum(_opened) / state_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--replicated-mib", type=int, default=64)
    parser.add_argument("--sharded-mib", type=int, default=64)
    parser.add_argument("--old", type=int, default=2)
    parser.add_argument("--new", type=int, nargs="+", default=[1, 3, 4])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    _count_reads()
    replicated = _tensors(args.replicated_mib, 1)
    sharded = torch.randn(args.sharded_mib * FLOATS_PER_MIB // 256, 256)
    with tempfile.TemporaryDirectory(prefix="spothop-bench-reshard-") as folder:
        url = str(Path(folder) / "ckpt")
        _save_old(url, args.old, replicated, sharded)
        rows: list[tuple[str, float, float]] = []
        same = [_restore(url, args.old, 0) for _ in range(args.repeat)]
        rows.append((f"same world ({args.old} -> {args.old}), rank 0", _median(same), same[0][1]))
        for new in args.new:
            for rank in range(new):
                runs = [_restore(url, new, rank) for _ in range(args.repeat)]
                rows.append(
                    (f"re-sharded {args.old} -> {new}, rank {rank}", _median(runs), runs[0][1])
                )
    print(
        f"state: {args.replicated_mib} MiB replicated + {args.sharded_mib} MiB sharded over "
        f"{args.old} ranks; medians of {args.repeat}"
    )
    print(f"{'restore':<36} {'seconds':>8} {'bytes read / state':>19}")
    for name, seconds, ratio in rows:
        print(f"{name:<36} {seconds:>8.3f} {ratio:>19.2f}")


def _median(runs: list[tuple[float, float]]) -> float:
    return statistics.median(seconds for seconds, _ in runs)


if __name__ == "__main__":
    main()
