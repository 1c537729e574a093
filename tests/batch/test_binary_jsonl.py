"""A binary file named ``.jsonl`` is no JSON Lines: refused at launch naming the file and its
line, and never enqueued as shards no worker can read (a job relaunched forever)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spothop.batch import BatchInput, plan_shards
from spothop.batch.inputs import check_jsonl_head
from spothop.errors import JobSpecError
from spothop.jobs.spec import load_job
from spothop.queue.errors import BatchSpecError
from spothop.testing import FakeProvider

BINARY = bytes(range(256)) * 8


def test_a_binary_jsonl_is_refused_when_its_shards_are_planned(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n' + BINARY)
    with pytest.raises(BatchSpecError, match=r"data\.jsonl: line 2 is not UTF-8 text"):
        plan_shards(BatchInput(records=str(path), records_per_shard=1))


def test_launch_refuses_a_binary_jsonl_input_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.providers import registry
    from spothop.service.launch import check_launchable

    bucket = tmp_path / "bucket"
    bucket.mkdir()
    (bucket / "ok.jsonl").write_text('{"a": 1}\n')
    (bucket / "bin.jsonl").write_bytes(BINARY)
    provider = FakeProvider(bucket_paths=[bucket])
    monkeypatch.setattr(registry, "default_providers", lambda: {provider.name: provider})
    spec = load_job(
        {
            "name": "b",
            "kind": "batch",
            "run": "python work.py",
            "batch": {"inputs": ["bucket/*.jsonl"], "output": "bucket/out"},
        },
        base_dir=tmp_path,
    )
    with pytest.raises(JobSpecError, match=r"batch\.inputs\.0: .*bin\.jsonl: line 1 is not UTF-8"):
        check_launchable(spec)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=200), min_size=1, max_size=40))
def test_any_utf8_text_passes_the_launch_check(tmp_path_factory: object, lines: list[str]) -> None:
    import tempfile

    text = "\n".join(line.replace("\x00", "") for line in lines)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_text(text, encoding="utf-8")
        check_jsonl_head(str(path), head_bytes=64)  # a head cut anywhere, inside a character too
