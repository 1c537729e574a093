"""Checkpoints near the new instances: a restore from the own region's replica against the far primary.

The stores are in memory behind a throttle that charges each read a round
trip plus its bytes at a bandwidth, per bucket:

- ``near`` (the relaunched instance's region): ``--near-rtt-ms`` (default 2) and
  ``--near-mbps`` (default 1000 MB/s);
- ``far`` (the primary, in the region the job started in): ``--far-rtt-ms``
  (default 80, a transatlantic round trip) and ``--far-mbps`` (default 100 MB/s,
  one cross-region stream).

Writes are not throttled: the figure is the restore. The bench saves a state
of ``--mib`` MiB (float32 noise, which does not compress) with one replica in
``near`` and times, best of ``--repeat``:

- ``save (loop stall)``: what ``save()`` held the caller, with and without the
  replica. Replication runs in the background, so the two should match;
- ``replicate``: the background copy's seconds;
- ``restore``: a fresh instance (an empty local disk) in the near region. It
  reads the replica. The same instance with no replica named reads the primary.

    .venv/bin/python -P bench/replicas.py [--mib 256] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from spothop.checkpoint import Checkpointer
from spothop.checkpoint.replicas import PROVIDER_ENV, REGION_ENV
from spothop.testing.memory_store import memory_filesystem

PROTOCOL = "benchmem"
LINKS: dict[str, tuple[float, float]] = {}  # bucket → (rtt_s, bytes per second)


def _charge(path: str, size: int) -> None:
    """A read's cost on its bucket's link: a round trip plus its bytes at the bandwidth."""
    rtt_s, rate = LINKS.get(path.lstrip("/").split("/", 1)[0], (0.0, float("inf")))
    time.sleep(rtt_s + size / rate)


FS = memory_filesystem(PROTOCOL, _charge)


def _run(mib: int, tmp: Path, trial: int) -> dict[str, float]:
    import os

    FS.clear()
    primary, near = f"{PROTOCOL}://far/run", f"{PROTOCOL}://near/run"
    replicas = {"sim/near-1": near}
    rng = np.random.default_rng(trial)
    state = {"w": rng.standard_normal(mib * 1024 * 1024 // 4).astype(np.float32)}
    os.environ[PROVIDER_ENV], os.environ[REGION_ENV] = "sim", "far-1"
    out: dict[str, float] = {}
    with Checkpointer(f"{PROTOCOL}://far/plain", local_url=str(tmp / f"p{trial}")) as plain:
        out["save_plain_s"] = plain.save(state, 1).blocking_s
        plain.wait()
    with Checkpointer(primary, local_url=str(tmp / f"a{trial}"), replicas=replicas) as ckpt:
        handle = ckpt.save(state, 1)
        out["save_replicated_s"] = handle.blocking_s
        handle.wait()
        ckpt.replicas.wait()
        assert ckpt.replicas.replicator is not None
        out["replicate_s"] = ckpt.replicas.replicator.stats.seconds
    os.environ[REGION_ENV] = "near-1"
    for name, named in (("restore_replica_s", replicas), ("restore_primary_s", {})):
        with Checkpointer(primary, local_url=str(tmp / f"{name}{trial}"), replicas=named) as c:
            started = time.perf_counter()
            restored = c.restore()
            out[name] = time.perf_counter() - started
            assert restored is not None and restored.step == 1
            assert restored.url == (near if named else primary), restored.url
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--near-rtt-ms", type=float, default=2.0)
    parser.add_argument("--near-mbps", type=float, default=1000.0)
    parser.add_argument("--far-rtt-ms", type=float, default=80.0)
    parser.add_argument("--far-mbps", type=float, default=100.0)
    args = parser.parse_args()
    LINKS["near"] = (args.near_rtt_ms / 1000, args.near_mbps * 1e6)
    LINKS["far"] = (args.far_rtt_ms / 1000, args.far_mbps * 1e6)
    with tempfile.TemporaryDirectory() as folder:
        runs = [_run(args.mib, Path(folder), i) for i in range(args.repeat)]
    best = {key: min(r[key] for r in runs) for key in runs[0]}
    print(
        f"state {args.mib} MiB; near {args.near_rtt_ms:g} ms / {args.near_mbps:g} MB/s, "
        f"far {args.far_rtt_ms:g} ms / {args.far_mbps:g} MB/s; best of {args.repeat}"
    )
    rows = [
        ("save, loop stall, no replica", best["save_plain_s"]),
        ("save, loop stall, 1 replica", best["save_replicated_s"]),
        ("replicate (background)", best["replicate_s"]),
        ("restore from the own region's replica", best["restore_replica_s"]),
        ("restore from the far primary", best["restore_primary_s"]),
    ]
    width = max(len(name) for name, _ in rows)
    for name, seconds in rows:
        print(f"  {name:<{width}}  {seconds:8.3f} s")
    print(
        f"  {'restore speed-up':<{width}}  {best['restore_primary_s'] / best['restore_replica_s']:8.2f} x"
    )


if __name__ == "__main__":
    main()
