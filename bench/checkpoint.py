"""Checkpoint benchmark: spothop's tiers against plain writes, torch.save and DCP async_save.

    .venv/bin/python bench/checkpoint.py --sizes-mib 256 2048

For each state size (real float32 torch tensors of 4 MiB each) it measures, side
by side in one run, and prints one table:

* full synchronous save throughput vs a plain file write (+fsync) of the same bytes (target ≥ 0.9),
  medians of alternating pairs, for the local tier (raw) and the durable tier (adaptive zstd 3, into
  a folder), the save being ``save(sync=True)`` (it writes the tensors' own memory, as the plain
  write does); for the local tier also the time after the copy (``total_s - blocking_s``: here
  little more than the whole, nothing being copied);
* training-loop stall of an async save vs a synchronous ``torch.save`` (target ≥ 10× less),
  with ``torch.distributed.checkpoint.async_save`` in the same table: the first save (host
  buffers allocated and page-faulted; and after ``Checkpointer.prepare`` allocated them in the
  background) and the steady state (every tensor changed by a training
  step, copied into the buffers kept from the previous save), plus the steady state of a
  LoRA-like run (1 % changed) with ``skip_unchanged=True``; and in a real training loop (linear
  layers, SGD) the stall of a save that copies inside ``save()`` against one whose copy overlaps
  the next forward and backward pass (``TorchState.save(overlap=True)``), alternating;
* an emergency delta when 1 % of the parameters changed (LoRA-like): bytes ≤ 2 %, time ≤ 1/20 of full,
  found by comparing with the host copy kept from the durable base (nothing says which tensors
  changed: every byte is compared), the same delta of a LoRA-like model through ``TorchState``
  (frozen weights trusted by version counter, trained ones compared), and the delta from a
  restarted process (no kept copy: every chunk copied and hashed) in the same run;
* restore time vs a plain read of the same bytes (target ≥ 0.8): the plain read reads the very
  files the restore needs into fresh memory; medians of alternating pairs, for a full checkpoint
  of each tier (the local tier's, the durable tier's) and a delta chain (durable base + emergency
  delta), with the page cache cold (both sides' files evicted first: what a restart on a fresh
  instance reads) and warm (both sides' files cached: an untimed pair reads them first);
* peak extra host memory (RSS) during an async save, as a multiple of the state size (target ≤ 1.1).

The ratio cell is the median of the pairs' own ratios, their spread (lowest-highest) and the
ratio of the fastest runs. The last column is the CPU seconds (medians, every thread of this
process, the kernel's work for it included) that ours and the baseline took: where other work
keeps the cores busy, nothing overlaps and the wall-clock ratio tends to the inverse ratio of these,
so a row far from its target with a CPU ratio near it says the machine was busy, not slow code.

Timings are wall-clock on whatever machine runs it; no GPU is needed. ``--io-only`` prints just the
save and restore ratios (the rows with a target), which takes a fraction of the time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Other benchmarks in bench/ (queue.py) would shadow stdlib modules torch imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from spothop.checkpoint import Checkpointer, Tier  # noqa: E402
from spothop.checkpoint import manifest as manifest_mod  # noqa: E402

TENSOR_MIB = 4
CHANGED_FRACTION = 0.01  # LoRA-like: 1 % of the parameters change between durable and emergency
PAGE = os.sysconf("SC_PAGE_SIZE")
# Local full saves and plain writes alternate this many times; the rows give the medians, because
# the shared disk's rate moves 2-4x within seconds and a single pair can land on opposite sides.
# Steps: below the later saves', so the delta chain stays the newest checkpoint; untimed pairs first
# (the local store is its own folder: no clash with the first, durable, save at step 1).
# Timed pairs take the steps after their warm-ups (``--pairs`` of them, at most MAX_PAIRS).
LOCAL_WARMUP_STEPS, FIRST_LOCAL_STEP = (0, 1), 2
STEADY_STEP = 100
DURABLE_WARMUP_STEPS, FIRST_DURABLE_STEP = (101,), 102
DELTA_STEP, RESTARTED_LOCAL_STEP, RESTARTED_DELTA_STEP = 200, 201, 202
MAX_PAIRS = 98
LOOP_BATCH = 32  # the training-loop rows: a forward and backward pass long enough to hide a copy in
LOOP_PAIRS = 3
RESTORE_WARMUP_PAIRS = 1  # restores and plain reads alternate; ``--pairs`` timed after these
SAVE_TARGET, RESTORE_TARGET = 0.9, 0.8  # of a plain write + fsync, of a plain read (the issue's)
Row = tuple[str, str, str, str, str, str]  # measurement, spothop, baseline, ratio, target, CPU


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRss:
    """Samples RSS on a thread; ``peak - base`` is the extra memory while active."""

    def __init__(self) -> None:
        self.base = rss_bytes()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, rss_bytes())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak - self.base


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cpu_s() -> float:
    """CPU seconds this process has used so far, every thread (the kernel's time on its behalf too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed_cpu(fn: Callable[[], Any], cpu: list[float]) -> float:
    """``timed(fn)``, appending the CPU seconds it took to ``cpu``."""
    start = cpu_s()
    seconds = timed(fn)
    cpu.append(cpu_s() - start)
    return seconds


def touch(tensors: list[torch.Tensor]) -> None:
    """An in-place update, as an optimizer step makes (bumps every version counter)."""
    with torch.no_grad():
        for t in tensors:
            t.mul_(1.0001)


def make_state(size_mib: int) -> dict[str, torch.Tensor]:
    count = max(1, size_mib // TENSOR_MIB)
    gen = torch.Generator().manual_seed(0)
    return {
        f"layer{i}.weight": torch.randn(TENSOR_MIB * 2**20 // 4, generator=gen)
        for i in range(count)
    }


def plain_write(state: dict[str, torch.Tensor], path: Path) -> None:
    with open(path, "wb") as f:
        for t in state.values():
            f.write(t.numpy().data)
        f.flush()
        os.fsync(f.fileno())


def plain_read(paths: list[Path]) -> None:
    """Read each file whole into fresh memory, as a loader that keeps the bytes would."""
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            into = memoryview(np.empty(path.stat().st_size, dtype=np.uint8).data)
            done = 0
            while done < len(into):
                got = f.readinto(into[done:])
                if not got:
                    break
                done += got


def evict(paths: list[Path]) -> None:
    """Drop the files' pages from the page cache (written back first), so that the next read comes
    from the disk; needs no privilege, unlike ``drop_caches``."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def chain_files(restored: Any) -> list[Path]:
    """The pack files a restore of ``restored``'s checkpoint read: its own and its ancestors'."""
    from spothop.checkpoint.reader import ancestors
    from spothop.checkpoint.store import Store

    store = Store(restored.url)
    manifests = [restored.manifest, *ancestors(store, restored.manifest)]
    return [Path(store.path(f.path)) for m in manifests for f in m.files]


def ratio_cells(baseline: list[float], ours: list[float], nbytes: int) -> tuple[str, str, str]:
    """Our rate, the baseline's (medians) and the ratio: the median of the pairs' own ratios (each
    pair ran back to back, so a disk or CPU that slows down for both cancels out), their spread,
    then the ratio of the fastest runs (what a quiet machine gives)."""
    ratios = sorted(b / o for b, o in zip(baseline, ours, strict=True))
    return (
        f"{nbytes / statistics.median(ours) / 1e9:.2f} GB/s",
        f"{nbytes / statistics.median(baseline) / 1e9:.2f} GB/s",
        f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}; "
        f"best {min(baseline) / min(ours):.2f})",
    )


def cpu_cell(baseline: list[float], ours: list[float]) -> str:
    """CPU seconds (medians, all threads) of ours and the baseline's: on a machine whose cores are
    busy with other work, the wall-clock ratio tends to the ratio of these, whatever overlaps."""
    return f"{statistics.median(ours):.3f} / {statistics.median(baseline):.3f}"


def restore_rows(label: str, reader: Checkpointer, nbytes: int, pairs: int) -> list[Row]:
    """Restore (everything verified) and a plain read of the same files, alternating, with the page
    cache cold and then warm; ``pairs`` timed after ``RESTORE_WARMUP_PAIRS`` untimed."""
    first = reader.restore(apply_rng=False)
    assert first is not None
    files = chain_files(first)
    rows: list[Row] = []
    for cache in ("cold", "warm"):
        reads: list[float] = []
        restores: list[float] = []
        read_cpu: list[float] = []
        restore_cpu: list[float] = []
        for pair in range(RESTORE_WARMUP_PAIRS + pairs):
            if cache == "cold":
                evict(files)
            read_s = timed_cpu(lambda: plain_read(files), read_cpu)
            if cache == "cold":
                evict(files)
            restore_s = timed_cpu(lambda: reader.restore(apply_rng=False), restore_cpu)
            if pair < RESTORE_WARMUP_PAIRS:
                read_cpu.pop()
                restore_cpu.pop()
            else:
                reads.append(read_s)
                restores.append(restore_s)
        rows.append(
            (
                f"restore ({label}, page cache {cache}) vs plain read",
                *ratio_cells(reads, restores, nbytes),
                f"≥ {RESTORE_TARGET}",
                cpu_cell(read_cpu, restore_cpu),
            )
        )
    return rows


def drop_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def settle(ckpt: Checkpointer) -> None:
    """Before each timed write, on both sides alike: let the checkpointer's background clean-up (the
    deletion of the superseded local snapshot, off the save's path since it runs after ``wait()``)
    finish, and write back whatever is dirty, so that neither side pays for the other's leftovers."""
    ckpt.wait()
    os.sync()


def dcp_async_stall(state: dict[str, torch.Tensor], path: Path) -> str:
    try:
        import torch.distributed.checkpoint as dcp

        # Single process on purpose: DCP says so in a warning that would land in the table's output.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")

        start = time.perf_counter()
        future = dcp.async_save(state, checkpoint_id=str(path))
        stall = time.perf_counter() - start
        future.result()
        return f"{stall:.3f}"
    except (
        Exception
    ) as exc:  # DCP needs a process group on some builds: report, do not fail the table
        return f"n/a ({type(exc).__name__})"


def local_stall(ckpt: Checkpointer, state: dict[str, torch.Tensor], step: int) -> float:
    """The stall of one asynchronous local save (the copy into host buffers); waits for the write."""
    handle = ckpt.save(state, step, tier=Tier.LOCAL)
    handle.wait()
    return handle.blocking_s


def training_loop_stalls(size_mib: int, work: Path) -> tuple[float, float, float, float]:
    """A real training loop over a model of ``size_mib`` (bias-free 1024x1024 layers, 4 MiB each, SGD):
    median stall of a save that copies inside ``save()``, and of one whose copy overlaps the next
    forward and backward pass and is waited for at ``optimizer.step()`` (``blocking_s + waited_s``),
    alternating; and for each kind the median time from the ``save()`` call to the end of the next
    step (on this CPU the background copy and write share the cores with that step; on a GPU
    the copy engine and the host would not take them from the device)."""
    from spothop.checkpoint.pytorch import TorchState

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[torch.nn.Linear(1024, 1024, bias=False) for _ in range(max(1, size_mib // 4))]
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    batch = torch.randn(LOOP_BATCH, 1024)
    parts = TorchState(model, optimizer)
    ckpt = Checkpointer(
        str(work / "loop"), local_url=str(work / "loop-local"), keep_local=1, keep_chains=1
    )

    def train_step() -> float:
        start = time.perf_counter()
        optimizer.zero_grad()
        model(batch).square().mean().backward()
        optimizer.step()
        return time.perf_counter() - start

    train_step()
    parts.prepare(
        ckpt
    ).result()  # the buffers exist before the first timed save, for both kinds alike
    train_step()
    stalls: dict[bool, list[float]] = {False: [], True: []}
    through: dict[bool, list[float]] = {False: [], True: []}
    for step, overlap in enumerate((False, True) * LOOP_PAIRS, start=1):
        settle(ckpt)
        handle = parts.save(ckpt, step, tier=Tier.LOCAL, overlap=overlap)
        next_step = (
            train_step()
        )  # its forward and backward run while an overlapped copy does; its step waits
        stalls[overlap].append(handle.blocking_s + handle.waited_s)
        through[overlap].append(handle.blocking_s + next_step)
        handle.wait()
    ckpt.close()
    drop_dir(work / "loop-local")
    return (
        statistics.median(stalls[False]),
        statistics.median(stalls[True]),
        statistics.median(through[False]),
        statistics.median(through[True]),
    )


def lora_delta(size_mib: int, work: Path) -> tuple[float, int, float, int]:
    """A LoRA-like model through ``TorchState``: bias-free 1024x1024 layers, all frozen but 1 % of them
    (at least one), trained with SGD. A full durable save, one training step, then an emergency delta
    (frozen weights are trusted by version counter, trained ones compared). Returns the delta's time
    and bytes, and the full save's."""
    from spothop.checkpoint.pytorch import TorchState

    torch.manual_seed(0)
    layers = max(1, size_mib // 4)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=False) for _ in range(layers)])
    for layer in model:
        torch.nn.init.normal_(
            layer.weight, std=1024**-0.5
        )  # keeps activations (and gradients) from vanishing
    model.requires_grad_(False)
    trained = [model[i] for i in range(max(1, round(layers * CHANGED_FRACTION)))]
    for layer in trained:
        layer.requires_grad_(True)
    optimizer = torch.optim.SGD([p for layer in trained for p in layer.parameters()], lr=1e-3)
    parts = TorchState(model, optimizer)
    ckpt = Checkpointer(
        str(work / "lora-delta"), local_url=str(work / "lora-delta-local"), keep_chains=1
    )

    def train_step() -> None:
        optimizer.zero_grad()
        model(torch.randn(LOOP_BATCH, 1024)).square().mean().backward()
        optimizer.step()

    train_step()
    parts.save(ckpt, 1).wait()  # untimed: its buffers are allocated and faulted in here
    train_step()
    settle(ckpt)
    start = time.perf_counter()
    full = parts.save(ckpt, 2).wait()
    full_s = time.perf_counter() - start
    train_step()
    settle(ckpt)
    start = time.perf_counter()
    delta = parts.save(ckpt, 3, tier=Tier.EMERGENCY).wait()
    delta_s = time.perf_counter() - start
    trained_bytes = sum(
        p.numel() * p.element_size() for layer in trained for p in layer.parameters()
    )
    if delta.size_bytes < trained_bytes // 2:
        raise SystemExit(
            f"the LoRA-like step changed too little ({delta.size_bytes} bytes): the row would mislead"
        )
    ckpt.close()
    drop_dir(work / "lora-delta")
    return delta_s, delta.size_bytes, full_s, full.size_bytes


def bench_size(
    size_mib: int, work: Path, io_only: bool, pairs: int, restore_pairs: int
) -> list[Row]:
    state = make_state(size_mib)
    nbytes = sum(t.numel() * 4 for t in state.values())
    rows: list[tuple[str, ...]] = []
    local = Checkpointer(
        str(work / "d"), local_url=str(work / "local"), keep_local=1, keep_chains=1
    )
    # The async save runs first: memory freed by earlier saves stays in the allocator and hides the peak.
    peak = PeakRss()
    handle = local.save(state, 1)
    stall = handle.blocking_s
    peak.peak = max(peak.peak, rss_bytes())  # the host copy is alive now, whatever the sampler saw
    handle.wait()
    extra = peak.stop()
    # Every tensor changed since the last save, as after a training step: the save copies all of it.
    # Plain write and local save side by side, alternating. The plain write writes each tensor's own
    # memory (no copy), as a torch.save-free user write would. The save is synchronous
    # (``save(sync=True)``, which returns once committed): it too writes the tensors' own memory, with
    # no host copy; the "after the copy" row leaves out what was still copied (SaveStats.total_s -
    # blocking_s: nothing here but the plain values, all tensors being contiguous CPU ones).
    # Both sides keep their previous file until the new one is written, then delete it, untimed (the
    # checkpointer's local clean-up runs after ``wait()``; ``settle`` drains it). On this VM the order
    # matters more than anything else: page-cache pages freed a moment ago are reused at ~2 GB/s, while
    # pages the balloon driver has handed back to the host cost ~0.35 GB/s to touch again. Deleting
    # the old plain file *before* the timed write (as this bench once did) gave the plain write warm
    # pages and the save cold ones. Now every timed write, on either side, follows the other side's
    # deletion of a file of the same size; two untimed warm-up pairs make that true of the first one.
    plain_files: list[Path] = []

    def plain_pair(step: int, cpu: list[float]) -> float:
        path = work / f"plain-{step}.bin"
        seconds = timed_cpu(lambda: plain_write(state, path), cpu)
        for old in plain_files:
            old.unlink()
        plain_files[:] = [path]
        return seconds

    def alternate(
        tier: Tier, warmup: tuple[int, ...], first: int
    ) -> tuple[list[float], list[float], list[float], str]:
        """Plain write, full save and the time after the copy over alternating pairs (warm-ups
        untimed), and the CPU cell of the writes and saves."""
        raws: list[float] = []
        saves: list[float] = []
        phases: list[float] = []
        raw_cpu: list[float] = []
        save_cpu: list[float] = []
        for step in (*warmup, *range(first, first + pairs)):
            settle(local)
            raw = plain_pair(step, raw_cpu)
            touch(list(state.values()))
            settle(local)
            start, start_cpu = time.perf_counter(), cpu_s()
            pair = local.save(state, step, tier=tier, sync=True)
            save_cpu.append(cpu_s() - start_cpu)
            if step in warmup:
                raw_cpu.pop()
                save_cpu.pop()
                continue
            raws.append(raw)
            saves.append(time.perf_counter() - start)
            phases.append(pair.stats.total_s - pair.stats.blocking_s)
        return raws, saves, phases, cpu_cell(raw_cpu, save_cpu)

    raws, saves, phases, local_cpu = alternate(Tier.LOCAL, LOCAL_WARMUP_STEPS, FIRST_LOCAL_STEP)
    touch(list(state.values()))
    steady = local.save(state, STEADY_STEP, tier=Tier.LOCAL)
    steady_stall = steady.blocking_s
    steady.wait()
    durable_raws, durables, _, durable_cpu = alternate(
        Tier.DURABLE, DURABLE_WARMUP_STEPS, FIRST_DURABLE_STEP
    )
    durable_s = statistics.median(durables)
    last_durable = local.wait()
    assert last_durable is not None
    # The newest checkpoint in the durable store is this full save until the delta below.
    durable_reader = Checkpointer(str(work / "d"), local_url=str(work / "none"))
    restores = restore_rows("full, durable tier", durable_reader, nbytes, restore_pairs)
    durable_reader.close()
    target = f"≥ {SAVE_TARGET}"
    rows.append(
        (
            "full save, local tier (raw) vs plain write+fsync",
            *ratio_cells(raws, saves, nbytes),
            target,
            local_cpu,
        )
    )
    rows.append(
        (
            "local tier, after the copy (total - stall) vs plain write+fsync",
            *ratio_cells(raws, phases, nbytes),
        )
    )
    rows.append(
        (
            "full save, durable tier (adaptive zstd 3) vs plain write+fsync",
            *ratio_cells(durable_raws, durables, nbytes),
            target,
            durable_cpu,
        )
    )
    if io_only:
        touch(list(state.values())[: max(1, round(len(state) * CHANGED_FRACTION))])
        local.save(state, DELTA_STEP, tier=Tier.EMERGENCY).wait()
        return _finish([*rows, *restores, *_restores(work, nbytes, restore_pairs)], local, size_mib)

    torch_save_s = timed(lambda: torch.save(state, work / "torch.pt"))
    (work / "torch.pt").unlink()

    def vs_torch_save(name: str, stall: float) -> None:
        rows.append(
            (name, f"{stall:.3f} s", f"{torch_save_s:.3f} s", f"{torch_save_s / stall:.1f}x")
        )

    vs_torch_save("stall: first async save vs torch.save (sync)", stall)
    prepared = Checkpointer(
        str(work / "p"), local_url=str(work / "p-local"), keep_local=1, keep_chains=1
    )
    prepared.prepare(
        state
    ).result()  # as a training loop would, after its first step, in the background
    vs_torch_save(
        "stall: first async save after prepare() vs torch.save", local_stall(prepared, state, 1)
    )
    prepared.close()
    drop_dir(work / "p-local")
    vs_torch_save("stall: steady async save, all changed vs torch.save", steady_stall)
    lora = Checkpointer(
        str(work / "lora"),
        local_url=str(work / "lora-local"),
        keep_local=1,
        keep_chains=1,
        skip_unchanged=True,
    )
    lora.save(state, 1, tier=Tier.LOCAL).wait()
    touch(list(state.values())[: max(1, round(len(state) * CHANGED_FRACTION))])
    vs_torch_save(
        "stall: steady async save, 1 % changed, skip_unchanged", local_stall(lora, state, 2)
    )
    lora.close()
    drop_dir(work / "lora-local")
    in_save, overlapped, through_in_save, through_overlapped = training_loop_stalls(size_mib, work)
    vs_torch_save("training loop: copy inside save() vs torch.save", in_save)
    vs_torch_save(
        "training loop: copy overlapped, waits at optimizer.step vs torch.save", overlapped
    )
    rows.append(
        (
            "training loop: save + next step, overlapped vs copy inside save()",
            f"{through_overlapped:.3f} s",
            f"{through_in_save:.3f} s",
            f"{through_overlapped / through_in_save:.2f}",
        )
    )
    rows.append(
        ("stall: torch DCP async_save", dcp_async_stall(state, work / "dcp") + " s", "", "")
    )
    rows.append(
        ("peak extra RSS during async save / state size", f"{extra / nbytes:.2f}", "", "", "≤ 1.1")
    )

    changed = list(state.values())[: max(1, round(len(state) * CHANGED_FRACTION))]
    with torch.no_grad():
        for t in changed:
            t.mul_(1.01)
    start = time.perf_counter()
    delta = local.save(state, DELTA_STEP, tier=Tier.EMERGENCY)
    delta_manifest = delta.wait()
    delta_s = time.perf_counter() - start
    full_bytes = last_durable.size_bytes
    rows.append(
        (
            "emergency delta (1 % changed): bytes vs full",
            f"{delta_manifest.size_bytes / 2**20:.1f} MiB",
            f"{full_bytes / 2**20:.1f} MiB",
            f"{delta_manifest.size_bytes / full_bytes:.3f}",
        )
    )
    rows.append(
        (
            "emergency delta (1 % changed): time vs full durable",
            f"{delta_s:.3f} s",
            f"{durable_s:.3f} s",
            f"{delta_s / durable_s:.3f}",
        )
    )
    rows.append(
        (
            "emergency delta stall (compare with kept copy) vs torch.save",
            f"{delta.blocking_s:.3f} s",
            f"{torch_save_s:.3f} s",
            f"{torch_save_s / delta.blocking_s:.1f}x",
        )
    )
    lora_s, lora_bytes, lora_full_s, lora_full_bytes = lora_delta(size_mib, work)
    rows.append(
        (
            "emergency delta, LoRA-like model via TorchState: bytes vs full",
            f"{lora_bytes / 2**20:.1f} MiB",
            f"{lora_full_bytes / 2**20:.1f} MiB",
            f"{lora_bytes / lora_full_bytes:.3f}",
        )
    )
    rows.append(
        (
            "emergency delta, LoRA-like model via TorchState: time vs full durable",
            f"{lora_s:.3f} s",
            f"{lora_full_s:.3f} s",
            f"{lora_s / lora_full_s:.3f}",
        )
    )
    # The same delta from another process whose warm buffers hold a local save, not the durable base
    # (as after a restart and a local snapshot): every chunk is copied into them and hashed, which is
    # what every emergency delta did before deltas compared with the kept copy.
    restarted = Checkpointer(
        str(work / "d"), local_url=str(work / "local"), keep_local=1, keep_chains=1
    )
    restarted.save(state, RESTARTED_LOCAL_STEP, tier=Tier.LOCAL).wait()
    start = time.perf_counter()
    hashed = restarted.save(state, RESTARTED_DELTA_STEP, tier=Tier.EMERGENCY)
    hashed.wait()
    hashed_s = time.perf_counter() - start
    restarted.close()
    rows.append(
        (
            "emergency delta, hashing fallback: time vs full durable",
            f"{hashed_s:.3f} s",
            f"{durable_s:.3f} s",
            f"{hashed_s / durable_s:.3f}",
        )
    )

    return _finish([*rows, *restores, *_restores(work, nbytes, restore_pairs)], local, size_mib)


def _restores(work: Path, nbytes: int, pairs: int) -> list[Row]:
    """Restore rows: the newest local snapshot (a full checkpoint, raw) and the newest checkpoint of
    all, an emergency delta over the durable base (a chain)."""
    rows: list[Row] = []
    for label, reader in (
        ("full, local tier", Checkpointer(str(work / "none"), local_url=str(work / "local"))),
        ("delta chain", Checkpointer(str(work / "d"), local_url=str(work / "local"))),
    ):
        rows += restore_rows(label, reader, nbytes, pairs)
        reader.close()
    return rows


def _finish(rows: list[tuple[str, ...]], local: Checkpointer, size_mib: int) -> list[Row]:
    local.close()
    padded = [(*row, *[""] * (6 - len(row))) for row in rows]
    return [(f"{size_mib} MiB: {a}", b, c, d, e, f) for a, b, c, d, e, f in padded]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument(
        "--io-only",
        action="store_true",
        help="only the save and restore ratios (rows with a target)",
    )
    parser.add_argument(
        "--pairs", type=int, default=3, help=f"timed pairs per save and restore row (1-{MAX_PAIRS})"
    )
    parser.add_argument(
        "--restore-pairs",
        type=int,
        default=None,
        help="timed pairs per restore row (default: --pairs); a restore pair takes a fraction of a "
        "save pair's time, and more of them steady the medians on a busy machine",
    )
    parser.add_argument(
        "--format",
        type=int,
        choices=(2, 3, 4),
        default=4,
        help="the checkpoint format saves write: 4 (XXH3-128, the default), or 3 (BLAKE3) and 2 "
        "(sha256) as a save where xxhash (and blake3) cannot be imported writes, to compare",
    )
    args = parser.parse_args()
    if args.format < 4:  # what a save does where the faster hash cannot be imported
        manifest_mod._xxhash = None
    if args.format < 3:
        manifest_mod._blake3 = None
    if not 1 <= args.pairs <= MAX_PAIRS:
        parser.error(f"--pairs must be between 1 and {MAX_PAIRS}; got {args.pairs}")
    restore_pairs = args.pairs if args.restore_pairs is None else args.restore_pairs
    if not 1 <= restore_pairs <= MAX_PAIRS:
        parser.error(f"--restore-pairs must be between 1 and {MAX_PAIRS}; got {restore_pairs}")
    torch.set_num_threads(os.cpu_count() or 1)
    rows: list[Row] = []
    for size in args.sizes_mib:
        work = Path(tempfile.mkdtemp(prefix="spothop-bench-", dir=args.dir))
        try:
            rows += bench_size(size, work, args.io_only, args.pairs, restore_pairs)
        finally:
            drop_dir(work)
    header = ("measurement", "spothop", "baseline", "ratio (spread; best)", "target", "CPU s")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(6)]
    print(f"cpus={os.cpu_count()} torch={torch.__version__} checkpoint format={args.format}")
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
