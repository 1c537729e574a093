"""The LoRA fine-tune's checkpoint in this process: the adapter, not the base model. The
preempted runs under the agent are tests/examples/test_finetune.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("transformers")

from examples.finetune import finetune

from spothop.checkpoint import list_checkpoints


def test_a_checkpoint_holds_the_adapter_not_the_base_model(tmp_path: Path) -> None:
    url = str(tmp_path / "ckpt")
    finetune.train(url, 10, save_every=5)
    [*_, newest] = [i for i in list_checkpoints(url) if i.status == "committed"]
    model = finetune.build_model()
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    adapter = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    # The adapter, its two AdamW moments and a little more; the frozen base is not in it.
    assert newest.size_bytes < 4 * adapter < total
