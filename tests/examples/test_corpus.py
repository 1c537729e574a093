"""The example corpus: at least 20,000 varied passages, the same bytes on every run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from examples.embed.corpus import DEFAULT_COUNT, write_corpus


def test_the_corpus_is_large_varied_and_the_same_every_time(tmp_path: Path) -> None:
    first = write_corpus(tmp_path / "a.jsonl")
    second = write_corpus(tmp_path / "b.jsonl")
    assert (
        hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    )
    records = [json.loads(line) for line in first.read_text().splitlines()]
    assert len(records) == DEFAULT_COUNT >= 20_000
    assert len({r["id"] for r in records}) == len(records)
    texts = [r["text"] for r in records]
    assert len(set(texts)) > 0.9 * len(texts)  # varied, not a few templates repeated
    assert sum(t.startswith("Q: ") for t in texts) > 0.2 * len(texts)  # Q&A beside the reviews
    lengths = sorted(len(t) for t in texts)
    assert lengths[len(lengths) // 10] * 2 < lengths[-len(lengths) // 10]  # lengths vary


def test_another_seed_gives_another_corpus(tmp_path: Path) -> None:
    a = write_corpus(tmp_path / "a.jsonl", 100, seed=1).read_bytes()
    b = write_corpus(tmp_path / "b.jsonl", 100, seed=2).read_bytes()
    assert a != b
