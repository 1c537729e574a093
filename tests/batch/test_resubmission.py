"""Resubmitting a batch job: the same spec adds nothing; other sharding is refused, naming the difference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.batch import BatchSpec, load_spec, submit
from spothop.queue import open_queue
from spothop.queue.errors import BatchSpecError

RECORDS = 10


def _spec(folder: Path, per_shard: int, records: str = "docs.jsonl", **extra: object) -> BatchSpec:
    return load_spec(
        {
            "name": "embed",
            "input": {"records": str(folder / records), "records_per_shard": per_shard},
            "command": ["cat"],
            "output": str(folder / "out"),
            "queue": f"sqlite:///{folder / 'q.db'}",
            **extra,
        }
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in ("docs.jsonl", "other.jsonl"):
        with (tmp_path / name).open("w") as handle:
            for i in range(RECORDS):
                handle.write(json.dumps({"i": i}) + "\n")
    return tmp_path


def _payloads(folder: Path) -> list[object]:
    with open_queue(f"sqlite:///{folder / 'q.db'}", "embed") as queue:
        return [r.payload for r in queue.records()]


def test_the_same_spec_again_adds_nothing(folder: Path) -> None:
    assert submit(_spec(folder, 3)) == 4
    assert submit(_spec(folder, 3)) == 0
    assert len(_payloads(folder)) == 4


def test_other_records_per_shard_is_refused_and_named(folder: Path) -> None:
    submit(_spec(folder, 3))
    before = _payloads(folder)
    with pytest.raises(BatchSpecError) as refused:
        submit(_spec(folder, 5))
    message = str(refused.value)
    assert "job 'embed' was submitted with other sharding" in message
    assert "records_per_shard 3 then, 5 now" in message and "new name" in message
    assert _payloads(folder) == before  # nothing was added: no record is planned twice


def test_another_input_file_is_refused_and_named(folder: Path) -> None:
    submit(_spec(folder, 3))
    with pytest.raises(BatchSpecError, match=r"other\.jsonl"):
        submit(_spec(folder, 3, records="other.jsonl"))


def test_an_input_that_shrank_is_refused(folder: Path) -> None:
    files = [str(folder / f"f{i}.bin") for i in range(3)]
    base = {
        "name": "files",
        "command": ["cat"],
        "output": str(folder / "o"),
        "queue": f"sqlite:///{folder / 'q.db'}",
    }
    submit(load_spec({**base, "input": {"files": files}}))
    with pytest.raises(BatchSpecError, match="more shards than this spec plans"):
        submit(load_spec({**base, "input": {"files": files[:2]}}))


def test_files_appended_to_the_list_are_added(folder: Path) -> None:
    files = [str(folder / f"f{i}.bin") for i in range(3)]
    base = {
        "name": "files",
        "command": ["cat"],
        "output": str(folder / "o"),
        "queue": f"sqlite:///{folder / 'q.db'}",
    }
    assert submit(load_spec({**base, "input": {"files": files[:2]}})) == 2
    assert submit(load_spec({**base, "input": {"files": files}})) == 1
    with pytest.raises(
        BatchSpecError, match=r"file .*f1\.bin"
    ):  # a reordered list changes what shard-000000 is
        submit(load_spec({**base, "input": {"files": [files[1], files[0], files[2]]}}))


def test_the_cli_refuses_with_exit_2_and_one_line(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spothop.cli.main import main

    spec = folder / "spec.yaml"
    body = {
        "name": "embed",
        "input": {"records": str(folder / "docs.jsonl"), "records_per_shard": 3},
        "command": ["cat"],
        "output": str(folder / "out"),
        "queue": f"sqlite:///{folder / 'q.db'}",
    }
    spec.write_text(json.dumps(body))
    assert main(["queue", "submit", str(spec)]) == 0
    body["input"]["records_per_shard"] = 4  # type: ignore[index]
    spec.write_text(json.dumps(body))
    capsys.readouterr()
    assert main(["queue", "submit", str(spec)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: job 'embed' was submitted with other sharding")
        and "Traceback" not in err
    )
