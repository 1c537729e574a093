"""A real LoRA fine-tune that survives preemptions and ends bit-identical to an uninterrupted run.

``python finetune.py [--checkpoint-url URL] [--steps N] [--out FILE] [--step-sleep S]``

What it trains: a small causal transformer (a Llama architecture from a
``transformers`` config: 2 layers, hidden size 64, a byte-level vocabulary)
with **random initialisation from a fixed seed** — nothing is downloaded —
and a LoRA adapter on its attention projections (``peft``), on a generated
instruction set (arithmetic, string and lookup tasks, seeded).

How it survives: the base model is a pure function of the config and the
seed, so a checkpoint holds only what training changes — the adapter's
weights (the LoRA deltas), the optimizer's moments, the LR schedule, the
sampler's position and every RNG — through :mod:`spothop.checkpoint`
(:class:`AdapterState`, a ``TorchState`` whose state is the adapter). Each
step calls ``checkpoint_step``: under the spothop agent a final notice saves
an emergency delta and exits 75, an advance notice saves durably, and the
checkpoint interval (Young/Daly from the preemption rate the controller
passes) decides the rest; outside an agent ``--save-every`` steps save. A
restarted run restores the newest checkpoint that verifies and continues.

Determinism (CPU): one intra-op thread, deterministic kernels, the sampler's
and the DataLoader's own generators, LoRA dropout drawing from the global RNG
that the checkpoint carries; so the final adapter after any number of
preemptions is bit-identical to an uninterrupted run's (the tests check two
preemptions under the agent, and many under the controller in a storm). The
final adapter is written to ``--out`` (safetensors) and its sha256 printed.

Exit codes: 0 trained, 75 preempted (resumable), 2 bad options.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from spothop.checkpoint import Checkpointer
from spothop.checkpoint.pytorch import ResumableSampler, TorchState, deterministic

SEED = 1234
DEFAULT_STEPS = 300
DEFAULT_SAMPLES = 512
BATCH = 8
MAX_LEN = 48
VOCAB = 256 + 2  # bytes, then padding and end of sequence
PAD, EOS = 256, 257
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def instructions(count: int, seed: int = SEED) -> list[str]:
    """``count`` instruction/response pairs as text, the same for the same seed."""
    rng = random.Random(seed)
    words = ["spot", "zone", "shard", "model", "price", "lease", "queue", "cloud", "agent"]
    out: list[str] = []
    for _ in range(count):
        kind = rng.randrange(4)
        if kind == 0:
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            out.append(f"add {a} {b}: {a + b}")
        elif kind == 1:
            w = rng.choice(words)
            out.append(f"reverse {w}: {w[::-1]}")
        elif kind == 2:
            w = rng.choice(words)
            out.append(f"upper {w}: {w.upper()}")
        else:
            a, b = rng.randint(0, 20), rng.randint(1, 9)
            out.append(f"max {a} {b}: {max(a, b)}")
    return out


def encode(text: str) -> list[int]:
    """Byte-level tokens: no tokenizer to download."""
    return [*text.encode()[: MAX_LEN - 1], EOS]


class InstructionSet(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Padded token ids and labels (padding masked out of the loss with -100)."""

    def __init__(self, texts: list[str]) -> None:
        self.items = []
        for text in texts:
            ids = encode(text)
            padded = ids + [PAD] * (MAX_LEN - len(ids))
            labels = ids + [-100] * (MAX_LEN - len(ids))
            self.items.append((torch.tensor(padded), torch.tensor(labels)))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.items[index]


def build_model() -> Any:
    """The base model from a config (random weights from :data:`SEED`) with a LoRA adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    # peft asks transformers a question that transformers 5 renamed; nothing for a user to do.
    warnings.filterwarnings(
        "ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning
    )

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_LEN,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=EOS,
        tie_word_embeddings=False,
    )
    torch.manual_seed(SEED)
    base = LlamaForCausalLM(config)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules=LORA_TARGETS)
    return get_peft_model(base, lora)


class AdapterState(TorchState):
    """A ``TorchState`` whose model part is the LoRA adapter alone: the base is rebuilt from the seed."""

    def state_dict(self) -> dict[str, Any]:
        from peft import get_peft_model_state_dict

        state = super().state_dict()
        state["model"] = get_peft_model_state_dict(self.model)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.model, state["model"])
        for name in ("optimizer", "scheduler"):
            part = getattr(self, name)
            if part is not None and name in state:
                part.load_state_dict(state[name])


def adapter_bytes(model: Any) -> bytes:
    """The adapter's weights, serialised deterministically (safetensors, names sorted)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save

    state = get_peft_model_state_dict(model)
    return save({k: state[k].detach().contiguous() for k in sorted(state)})


def train(
    url: str | None,
    steps: int = DEFAULT_STEPS,
    *,
    samples: int = DEFAULT_SAMPLES,
    save_every: int = 25,
    step_sleep_s: float = 0.0,
    under_agent: bool = False,
    log_every: int = 0,
) -> tuple[bytes, int]:
    """Train to ``steps``; returns the final adapter (safetensors bytes) and the step resumed from."""
    deterministic(SEED)
    torch.set_num_threads(1)
    model = build_model()
    model.train()
    data = InstructionSet(instructions(samples))
    sampler = ResumableSampler(len(data), seed=SEED)
    # The loader's own generator: otherwise each iter() draws a seed from the global RNG, at
    # a different step in a resumed run than in an uninterrupted one.
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, generator=torch.Generator())
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    state = AdapterState(model, optimizer, scheduler, sampler=sampler)
    ckpt = Checkpointer(url, keep_chains=3) if url or under_agent else None
    step = (state.restore(ckpt) or 0) if ckpt else 0
    resumed_from = step
    batches = iter(loader)
    while step < steps:
        try:
            ids, labels = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        if log_every and step % log_every == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step_sleep_s:
            time.sleep(step_sleep_s)
        if ckpt is not None and under_agent:
            state.checkpoint_step(ckpt, step)  # Preempted (exit 75) after a final notice's save
        elif ckpt is not None and step % save_every == 0:
            state.save(ckpt, step)
    if ckpt is not None:
        ckpt.close()
    return adapter_bytes(model), resumed_from


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkpoint-url",
        default=os.environ.get("SPOTHOP_CHECKPOINT_URL"),
        help="where checkpoints go (default $SPOTHOP_CHECKPOINT_URL, set by the agent)",
    )
    parser.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", DEFAULT_STEPS)))
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("ADAPTER_OUT", "adapter.safetensors"))
    )
    parser.add_argument(
        "--save-every", type=int, default=25, help="outside an agent: steps between saves"
    )
    parser.add_argument(
        "--step-sleep", type=float, default=float(os.environ.get("STEP_SLEEP_S", 0))
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    from spothop.worker import sdk

    adapter, resumed_from = train(
        args.checkpoint_url,
        args.steps,
        save_every=args.save_every,
        step_sleep_s=args.step_sleep,
        under_agent=sdk.under_agent(),
        log_every=25,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(adapter)
    digest = hashlib.sha256(adapter).hexdigest()
    print(
        f"trained {args.steps} steps (resumed from {resumed_from}); adapter sha256 {digest} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
