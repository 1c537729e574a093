"""The Hugging Face callback, for real: a tiny GPT-2 built from a config (random init, no download)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from spothop.checkpoint import Checkpointer, list_checkpoints  # noqa: E402
from spothop.checkpoint.hf import SpothopCallback  # noqa: E402
from spothop.checkpoint.preemption import Preempted  # noqa: E402


def tiny_model() -> transformers.GPT2LMHeadModel:
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(config)


def trainer(
    model: torch.nn.Module, out: Path, callback: SpothopCallback, steps: int
) -> transformers.Trainer:
    pytest.importorskip(
        "accelerate"
    )  # transformers' Trainer needs it; the handler test below does not
    generator = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": ids, "labels": ids}
        for ids in torch.randint(0, 64, (16, 8), generator=generator)
    ]
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=4,
        save_strategy="no",
        report_to=[],
        logging_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])


def test_callback_saves_on_schedule_and_restores_into_a_fresh_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    url = str(tmp_path / "ckpt")
    checkpointer = Checkpointer(url, keep_chains=10)
    prepared: list[int] = []
    real_prepare = checkpointer.prepare
    checkpointer.prepare = lambda state: (
        prepared.append(len(state["optimizer"]["state"])) or real_prepare(state)
    )  # type: ignore[method-assign]
    callback = SpothopCallback(checkpointer, every_n_steps=2)
    run = trainer(tiny_model(), tmp_path / "out", callback, steps=4)
    run.train()
    assert [i.step for i in list_checkpoints(url)] == [2, 4]
    # Host buffers were allocated once, after the first step, with the optimizer's moments in the state.
    assert len(prepared) == 1 and prepared[0] > 0
    fresh = tiny_model()
    step = SpothopCallback(Checkpointer(url)).restore(fresh)
    assert step == 4
    trained = dict(run.model.named_parameters())
    assert all(torch.equal(p, trained[name].detach().cpu()) for name, p in fresh.named_parameters())


def test_stop_request_saves_an_emergency_delta_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    url = str(tmp_path / "ckpt")
    stop = {"now": False}
    callback = SpothopCallback(
        Checkpointer(url), every_n_steps=2, stop_requested=lambda: stop["now"]
    )
    run = trainer(tiny_model(), tmp_path / "out", callback, steps=20)
    original = callback.on_step_end

    def step_end(*args, **kwargs):  # type: ignore[no-untyped-def]
        stop["now"] = args[1].global_step == 3  # the agent signals a preemption after step 3
        if stop["now"]:
            # Let step 2's durable save commit first: an emergency save cancels one still in
            # flight (by design), and this test is about the delta built on that durable one.
            callback.checkpointer.wait()
        return original(*args, **kwargs)

    callback.on_step_end = step_end  # type: ignore[method-assign]
    with pytest.raises(Preempted) as stopped:  # out of trainer.train(): the process would exit 75
        run.train()
    assert stopped.value.code == 75 and stopped.value.step == 3
    assert run.state.global_step == 3
    infos = list_checkpoints(url)
    assert [(i.step, i.tier) for i in infos] == [(2, "durable"), (3, "emergency")]
    assert stopped.value.checkpoint_id == infos[1].checkpoint_id
    assert infos[1].parent == infos[0].checkpoint_id


def test_callback_through_transformers_callback_handler(tmp_path: Path) -> None:
    """The same events a Trainer sends, from transformers' own CallbackHandler, around real AdamW steps."""
    from transformers.trainer_callback import CallbackHandler, TrainerControl, TrainerState

    torch.manual_seed(0)
    url = str(tmp_path / "ckpt")
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    stop = {"now": False}
    callback = SpothopCallback(
        Checkpointer(url, keep_chains=10), every_n_steps=2, stop_requested=lambda: stop["now"]
    )
    handler = CallbackHandler([callback], model, None, optimizer, scheduler)
    args = (
        None  # TrainingArguments needs accelerate to set up devices; the callback does not read it
    )
    state, control = TrainerState(), TrainerControl()
    ids = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(1))
    while not control.should_training_stop:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        state.global_step += 1
        stop["now"] = state.global_step == 5  # the agent signals a preemption after step 5
        control = handler.on_step_end(args, state, control)
    with pytest.raises(Preempted):
        handler.on_train_end(args, state, control)
    infos = list_checkpoints(url)
    # step 4's durable save may still be uploading at the stop; the emergency save cancels it
    assert [(i.step, i.tier) for i in infos] in (
        [(2, "durable"), (4, "durable"), (5, "emergency")],
        [(2, "durable"), (5, "emergency")],
    )
    assert infos[-1].parent == infos[-2].checkpoint_id
    fresh = tiny_model()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    assert SpothopCallback(Checkpointer(url)).restore(fresh, fresh_opt) == 5
    trained = dict(model.named_parameters())
    assert all(torch.equal(p, trained[name]) for name, p in fresh.named_parameters())
    assert torch.equal(
        fresh_opt.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )


def test_overlapped_saves_hold_the_trainers_next_step_until_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real Trainer (accelerate wraps the optimizer): with the copy slowed down, the step-2
    checkpoint of an overlapped run must equal the step-2 checkpoint of a run that copies in save(),
    although step 3 ran while the copy was still going."""
    import time

    from spothop.checkpoint import bulk

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real_copy = bulk.copy

    def slow_copy(pairs: object) -> None:
        time.sleep(0.3)
        real_copy(pairs)  # type: ignore[arg-type]

    restored = {}
    for overlap in (False, True):
        if overlap:
            monkeypatch.setattr(bulk, "copy", slow_copy)
        torch.manual_seed(0)
        url = str(tmp_path / f"ckpt-{overlap}")
        callback = SpothopCallback(Checkpointer(url), every_n_steps=2, overlap=overlap)
        trainer(tiny_model(), tmp_path / f"out-{overlap}", callback, steps=3).train()
        found = Checkpointer(url).restore(apply_rng=False)
        assert found is not None and found.step == 2
        restored[overlap] = found.state["model"]
    assert restored[True].keys() == restored[False].keys()
    assert all(torch.equal(restored[True][k], restored[False][k]) for k in restored[False])
