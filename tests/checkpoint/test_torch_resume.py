"""Exact resume with a real model and optimizer: in-process, and across a SIGKILLed child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spothop.checkpoint import Checkpointer, Tier  # noqa: E402
from spothop.checkpoint.pytorch import ResumableSampler, TorchState  # noqa: E402
from tests.checkpoint import dist_script, train_script  # noqa: E402
from tests.waiting import scaled, wait_for  # noqa: E402

TOTAL = 17
SCRIPT = Path(train_script.__file__)
ROOT = SCRIPT.parents[2]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python that imports this checkout's spothop and tests."""
    return {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", **extra}


@pytest.mark.parametrize("overlap", [False, True], ids=["copy-in-save", "overlapped-copy"])
def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path: Path, overlap: bool) -> None:
    reference, _ = train_script.train(None, TOTAL)
    url = str(tmp_path / "ckpt")
    train_script.train(url, 11, overlap=overlap)  # stops after step 11; newest checkpoint is step 9
    resumed, resumed_from = train_script.train(url, TOTAL)  # fresh model, optimizer, loader
    assert resumed_from == 9
    assert resumed.tobytes() == reference.tobytes()


def test_resume_after_sigkill_matches_bit_for_bit(tmp_path: Path) -> None:
    env = child_env()
    url = str(tmp_path / "ckpt")
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), url, str(TOTAL), str(tmp_path / "never"), "--pause-at", "10"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == "step 10":
            break
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=scaled(30)) == -signal.SIGKILL
    assert not (tmp_path / "never").exists()
    # The resume is a fresh model, optimizer and loader, in this process: what the killed child left
    # on disk is all it has (a second child interpreter with torch would prove no more).
    resumed, resumed_from = train_script.train(url, TOTAL)
    # Step 9's save may have been in flight at the kill; then it never committed and step 6 is used.
    assert resumed_from in (6, 9)
    reference, _ = train_script.train(None, TOTAL)  # single-threaded like the child, so comparable
    assert resumed.tobytes() == reference.tobytes()


def test_a_worker_under_the_agent_saves_on_notices_exits_75_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    """A real training process talks to the agent's control folder: an advance notice after step 4 makes
    step 5 save durably; a final notice after step 7 makes step 8 save an emergency delta, tell the agent
    and exit 75 (no SIGTERM needed: it registered a stop callback). The resumed run ends bit-identical."""
    from spothop.agent.control import ControlDir
    from spothop.agent.model import EXIT_PREEMPTED
    from spothop.checkpoint import list_checkpoints
    from spothop.checkpoint.preemption import EXIT_PREEMPTED as CHECKPOINT_EXIT

    assert CHECKPOINT_EXIT == EXIT_PREEMPTED
    control = ControlDir(tmp_path / "agent")
    url = str(tmp_path / "ckpt")
    # What the agent sets; the script's --agent mode reads the checkpoint URL from it.
    env = child_env(SPOTHOP_AGENT_DIR=str(control.path), SPOTHOP_CHECKPOINT_URL=url)
    child = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            url,
            str(TOTAL),
            str(tmp_path / "never"),
            "--pause-at",
            "4,7",
            "--agent",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stdin is not None
    for line in child.stdout:
        if line.strip() == "step 4":
            assert control.callback_mode()  # the worker asked for stop requests instead of SIGTERM
            control.request_checkpoint("rebalance recommendation")
        elif line.strip() == "step 7":
            # Let step 5's durable save commit: an emergency save cancels one still in flight (by design).
            wait_for(
                lambda: [i for i in list_checkpoints(url) if i.status == "committed"],
                30,
                what="step 5's durable save to commit",
            )
            control.request_stop(time.time() + 30, "spot interruption", {"kind": "test"})
        else:
            continue
        child.stdin.write("\n")
        child.stdin.flush()
    assert child.wait(timeout=scaled(60)) == EXIT_PREEMPTED
    assert not (tmp_path / "never").exists()
    infos = list_checkpoints(url)
    assert [(i.step, i.tier) for i in infos] == [(5, "durable"), (8, "emergency")]
    said = control.saved()
    assert (
        said is not None and said["step"] == 8 and said["checkpoint_id"] == infos[1].checkpoint_id
    )
    resumed, resumed_from = train_script.train(url, TOTAL)
    assert resumed_from == 8
    reference, _ = train_script.train(None, TOTAL)
    assert resumed.tobytes() == reference.tobytes()


def test_sampler_resumes_mid_epoch_at_the_exact_sample() -> None:
    whole = ResumableSampler(10, seed=3)
    full = list(whole) + list(whole)
    first = ResumableSampler(10, seed=3)
    head = list(first)  # epoch 0
    it = iter(first)
    head += [next(it) for _ in range(4)]
    saved = first.state_dict()
    second = ResumableSampler(10, seed=3)
    second.load_state_dict(saved)
    assert head + list(second) == full
    assert sorted(full[:10]) == list(range(10)) and full[:10] != full[10:]


def test_validation_hook_falls_back_to_the_older_checkpoint(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 1)
    batch = torch.ones(2, 4)
    ckpt = Checkpointer(str(tmp_path / "ckpt"))
    state = TorchState(model)
    state.save(ckpt, 1, validation_value=float(model(batch).sum().detach())).wait()
    good = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        model.weight.add_(1.0)
    # recorded value that the restored weights cannot reproduce: a silently bad checkpoint
    state.save(ckpt, 2, validation_value=12345.0).wait()
    fresh = torch.nn.Linear(4, 1)
    step = TorchState(fresh).restore(ckpt, validate=lambda: float(fresh(batch).sum().detach()))
    assert step == 1
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), good, strict=True))


def test_emergency_delta_of_a_lora_like_model_writes_only_the_adapter(tmp_path: Path) -> None:
    base = torch.nn.Linear(256, 256)
    adapter = torch.nn.Linear(256, 4, bias=False)
    for p in base.parameters():
        p.requires_grad_(False)
    # Unfused updates bump the version counter, so it may be trusted here (opt-in).
    ckpt = Checkpointer(str(tmp_path / "ckpt"), chunk_bytes=64 * 1024, track_versions=True)
    state = lambda: {"base": base.state_dict(), "adapter": adapter.state_dict()}  # noqa: E731
    full = ckpt.save(state(), 1)
    full.wait()
    with torch.no_grad():
        adapter.weight.mul_(2.0)
    delta = ckpt.save(state(), 2, tier=Tier.EMERGENCY)
    manifest = delta.wait()
    assert manifest.parent == full.checkpoint_id
    assert (
        delta.stats.bytes_copied == adapter.weight.numel() * 4
    )  # the frozen base was not even copied
    assert manifest.size_bytes <= adapter.weight.numel() * 4
    restored = Checkpointer(str(tmp_path / "ckpt")).restore()
    assert restored is not None and restored.step == 2
    assert torch.equal(restored.state["adapter"]["weight"], adapter.weight)
    assert torch.equal(restored.state["base"]["weight"], base.weight)


class LoraLike(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base = torch.nn.Linear(256, 256)
        self.adapter = torch.nn.Linear(256, 4, bias=False)
        self.base.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x)[:, :4] + self.adapter(x)


@pytest.mark.parametrize("fused", [False, True])
def test_torch_state_trusts_only_frozen_weights_version_counters(
    tmp_path: Path, fused: bool
) -> None:
    """By default (no track_versions) a LoRA save and delta skip the frozen base, found by version counter,
    while the trained adapter, written by a possibly fused optimizer, is compared, so never missed; an
    in-place write to a frozen weight is still seen."""
    torch.manual_seed(0)
    model = LoraLike()
    optimizer = torch.optim.AdamW([model.adapter.weight], lr=0.1, fused=fused)
    parts = TorchState(model, optimizer)
    ckpt = Checkpointer(str(tmp_path / "ckpt"), local_url=str(tmp_path / "local"), chunk_bytes=4096)

    def train() -> None:
        optimizer.zero_grad()
        model(torch.randn(8, 256)).square().mean().backward()
        optimizer.step()

    train()
    parts.save(ckpt, 1).wait()
    train()
    adapter_and_moments = 3 * model.adapter.weight.numel() * 4  # weight, exp_avg, exp_avg_sq
    second = parts.save(ckpt, 2, tier=Tier.LOCAL)
    assert (
        second.stats.bytes_copied <= adapter_and_moments + 64
    )  # the frozen base was not copied again
    train()
    delta = parts.save(ckpt, 3, tier=Tier.EMERGENCY)
    delta.wait()
    assert delta.stats.bytes_copied <= adapter_and_moments + 64
    base_bytes = sum(p.numel() * 4 for p in model.base.parameters())
    assert delta.stats.bytes_written < base_bytes // 10
    restored = Checkpointer(str(tmp_path / "ckpt"), local_url=str(tmp_path / "none")).restore(
        apply_rng=False
    )
    assert restored is not None and restored.step == 3
    live = model.state_dict()
    assert all(torch.equal(restored.state["model"][k], v) for k, v in live.items())
    with torch.no_grad():
        model.base.bias.add_(1.0)  # an in-place write bumps the frozen weight's counter
    train()
    parts.save(ckpt, 4, tier=Tier.EMERGENCY).wait()
    restored = Checkpointer(str(tmp_path / "ckpt"), local_url=str(tmp_path / "none")).restore(
        apply_rng=False
    )
    assert restored is not None and restored.step == 4
    assert torch.equal(restored.state["model"]["base.bias"], model.base.bias)
    assert torch.equal(restored.state["model"]["adapter.weight"], model.adapter.weight)


def test_version_tracking_off_still_finds_changes_by_hash(tmp_path: Path) -> None:
    t = torch.zeros(1000)
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=400, track_versions=False)
    ckpt.save({"t": t}, 1).wait()
    t.data[:5] = 1.0  # through .data: invisible to the version counter, visible to the hash
    handle = ckpt.save({"t": t}, 2, tier="emergency")
    handle.wait()
    assert handle.stats.chunks_written == 1 and handle.stats.chunks_reused == 9
    restored = Checkpointer(str(tmp_path / "c")).restore()
    assert restored is not None and torch.equal(restored.state["t"], t)


def test_bfloat16_and_odd_shapes_round_trip(tmp_path: Path) -> None:
    state = {
        "bf": torch.randn(3, 5).to(torch.bfloat16),
        "empty": torch.empty(0, 3),
        "scalar": torch.tensor(7),
        "strided": torch.arange(12.0).reshape(3, 4).t(),
        "dtype": torch.float16,
        "np": np.arange(3),
    }
    ckpt = Checkpointer(str(tmp_path / "c"))
    ckpt.save(state, 1).wait()
    restored = ckpt.restore()
    assert restored is not None
    for key in ("bf", "empty", "scalar", "strided"):
        assert restored.state[key].dtype == state[key].dtype and torch.equal(
            restored.state[key], state[key]
        )
    assert restored.state["dtype"] is torch.float16


def test_fused_optimizer_updates_reach_the_emergency_delta(tmp_path: Path) -> None:
    # A fused AdamW writes weights without bumping PyTorch's version counter;
    # the default (content hashes) must still see every change.
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)

    def step() -> None:
        optimizer.zero_grad()
        model(torch.randn(8, 64)).square().mean().backward()
        optimizer.step()

    step()
    ckpt = Checkpointer(str(tmp_path / "c"))
    ckpt.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, 1).wait()
    step()
    ckpt.save(
        {"model": model.state_dict(), "optim": optimizer.state_dict()}, 2, tier=Tier.EMERGENCY
    ).wait()
    restored = Checkpointer(str(tmp_path / "c")).restore()
    assert restored is not None and restored.step == 2
    for name, value in model.state_dict().items():
        assert torch.equal(restored.state["model"][name], value), name


def test_an_overlapped_save_holds_the_optimizer_step_until_its_copy_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy is slowed down so that, without the pre-step hook, the step would land in the checkpoint;
    a forward pass in between writes batch-norm statistics, which must be saved as they were."""
    from spothop.checkpoint import bulk
    from spothop.checkpoint.pytorch import TorchState

    real_copy = bulk.copy
    started, release = threading.Event(), threading.Event()

    def slow_copy(pairs: object) -> None:
        started.set()
        release.wait(
            scaled(30)
        )  # held until the test lets it go: "still running" whatever the load
        real_copy(pairs)  # type: ignore[arg-type]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.BatchNorm1d(6))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    state = TorchState(model, optimizer)
    ckpt = Checkpointer(str(tmp_path))
    model(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    expected = {k: v.detach().clone() for k, v in model.state_dict().items()}
    monkeypatch.setattr(bulk, "copy", slow_copy)
    handle = state.save(ckpt, 1, overlap=True)
    assert (
        started.wait(scaled(5)) and not handle.copied()
    )  # save returned with the copy still running
    optimizer.zero_grad()
    model(torch.randn(4, 6)).sum().backward()  # reads parameters, writes batch-norm buffers
    threading.Timer(0.2, release.set).start()  # the copy ends 0.2 s from now...
    optimizer.step()  # ...and the step waits for it
    assert handle.copied() and handle.waited_s > 0.05
    handle.wait()
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert restored is not None
    saved = restored.state["model"]
    assert all(torch.equal(saved[k], v) for k, v in expected.items())
    assert not torch.equal(
        saved["0.weight"], model[0].weight.detach()
    )  # the step did change it later
    assert not torch.equal(saved["1.running_mean"], model[1].running_mean)


def test_frozen_takes_tensors_only(tmp_path: Path) -> None:
    from spothop.checkpoint import CheckpointConfigError

    with pytest.raises(CheckpointConfigError, match="frozen= takes torch tensors"):
        Checkpointer(str(tmp_path / "ckpt")).save({"w": torch.zeros(3)}, 1, frozen=[np.zeros(3)])
    assert not (tmp_path / "ckpt").exists()  # refused before anything was written


def restore_ranks(tmp_path: Path, url: str) -> list[str]:
    """Both ranks of ``dist_script.py`` restoring, as real processes joined by torch.distributed
    (gloo)."""
    script = Path(dist_script.__file__)
    env = child_env()
    init = tmp_path / "init"
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(init), url],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outs = [r.communicate(timeout=scaled(120)) for r in ranks]
    assert [r.returncode for r in ranks] == [0, 0], [err[-2000:] for _, err in outs]
    return [out.strip() for out, _ in outs]


def test_ranks_agree_when_a_checkpoint_verifies_on_one_rank_only(tmp_path: Path) -> None:
    """Rank 1's step-2 file is damaged; rank 0's is fine. Both ranks committed step 2, so only talking
    (all_reduce) can tell: both must restore step 1, each its own rank's values."""
    url = str(tmp_path / "ckpt")
    for rank in (0, 1):
        dist_script.save_steps(url, rank)  # a save talks to no other rank: in-process
    [pack] = (tmp_path / "ckpt" / "rank-00001").glob("step-000000000002-*/data-00000.pack")
    damaged = bytearray(pack.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    pack.write_bytes(bytes(damaged))
    assert restore_ranks(tmp_path, url) == ["restored 1 10", "restored 1 11"]


def test_checkpoint_step_prepares_the_buffers_on_its_first_quiet_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.checkpoint import FixedInterval

    monkeypatch.delenv("SPOTHOP_AGENT_DIR", raising=False)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    parts = TorchState(model, optimizer)
    ckpt = Checkpointer(str(tmp_path), interval=FixedInterval(3600))
    futures: list[Any] = []
    real_prepare = ckpt.prepare
    ckpt.prepare = lambda state: futures.append(real_prepare(state)) or futures[-1]  # type: ignore[method-assign]
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    assert (
        parts.checkpoint_step(ckpt, 1) is None
    )  # nothing due: buffers allocated in the background
    expected = sum(
        t.numel() * t.element_size()
        for t in [
            *model.parameters(),
            *[
                v
                for s in optimizer.state.values()
                for v in s.values()
                if isinstance(v, torch.Tensor)
            ],
        ]
    )
    assert len(futures) == 1 and futures[0].result() == expected  # the optimizer's moments included
    assert parts.checkpoint_step(ckpt, 2) is None and len(futures) == 1  # once only
