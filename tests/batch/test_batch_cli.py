"""``spothop queue submit`` / ``spothop queue work``: a JSONL input split into shards of N records,
processed by an ``@spothop.batch`` function or a worker command, outputs in a folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from spothop.cli.main import main

RECORDS = 10
PER_SHARD = 3

FUNCTION_MODULE = """
import spothop

@spothop.batch
def process(shard):
    return [{"i": r["i"], "upper": r["text"].upper()} for r in shard.records()]
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    with (tmp_path / "docs.jsonl").open("w") as handle:
        for i in range(RECORDS):
            handle.write(json.dumps({"i": i, "text": f"doc {i}"}) + "\n")
    (tmp_path / "review_embed_mod.py").write_text(FUNCTION_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # `work` puts the current folder on it
    return tmp_path


def write_spec(folder: Path, name: str, runner: str) -> Path:
    spec = folder / f"{name}.yaml"
    spec.write_text(
        f"name: {name}\ninput:\n  records: {folder / 'docs.jsonl'}\n  records_per_shard: {PER_SHARD}\n"
        f"{runner}\noutput: {folder / name}\nqueue: sqlite:///{folder / 'q.db'}\n"
    )
    return spec


def test_function_job_end_to_end(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(write_spec(job_dir, "fn-job", "function: review_embed_mod:process"))
    code, out, _ = run(capsys, "queue", "submit", spec, "--json")
    assert code == 0 and json.loads(out) | {"queue": None, "output": None} == {
        "job": "fn-job",
        "shards": 4,
        "added": 4,
        "queue": None,
        "output": None,
    }
    code, out, _ = run(capsys, "queue", "submit", spec, "--json")
    assert code == 0 and json.loads(out)["added"] == 0  # resubmitting adds nothing
    code, out, _ = run(capsys, "queue", "work", spec, "--worker", "w1", "--json")
    report = json.loads(out)
    assert code == 0 and (report["committed"], report["failed"], report["stopped"]) == (4, 0, False)
    outputs = sorted(p.name for p in (job_dir / "fn-job").iterdir() if p.is_file())
    assert outputs == [f"shard-{i:06d}" for i in range(4)]
    lines = [
        json.loads(line)
        for name in outputs
        for line in (job_dir / "fn-job" / name).read_text().splitlines()
    ]
    assert [r["i"] for r in lines] == list(range(RECORDS)) and lines[9]["upper"] == "DOC 9"
    code, out, _ = run(
        capsys, "queue", "stats", "fn-job", "--url", f"sqlite:///{job_dir / 'q.db'}", "--json"
    )
    assert code == 0 and json.loads(out)["done"] == 4


def test_command_job_end_to_end(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = "import sys, json; d = json.load(sys.stdin); print(d['id'], d['payload']['count'])"
    spec = str(
        write_spec(job_dir, "cmd-job", f"command: [{sys.executable}, -c, {json.dumps(script)}]")
    )
    code, out, _ = run(capsys, "queue", "submit", spec)
    assert code == 0 and "4 shard(s), 4 new" in out
    code, out, _ = run(capsys, "queue", "work", spec)
    assert code == 0 and "4 committed" in out
    assert (job_dir / "cmd-job" / "shard-000003").read_text() == "shard-000003 1\n"


def test_bad_specs_are_clear_errors(job_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "queue", "submit", str(job_dir / "absent.yaml"))
    assert code == 3 and "the batch spec does not exist" in err  # not found
    (job_dir / "bad.yaml").write_text("name: x\n")
    code, _, err = run(capsys, "queue", "submit", str(job_dir / "bad.yaml"))
    assert code == 2 and "input: Field required" in err
    spec = write_spec(job_dir, "gone", "function: review_embed_mod:process")
    spec.write_text(spec.read_text().replace("docs.jsonl", "missing.jsonl"))
    code, _, err = run(capsys, "queue", "submit", str(spec))
    assert code == 2 and "input.records: cannot read" in err and "missing.jsonl" in err
    (job_dir / "nofn.yaml").write_text(
        f"name: nofn\ninput: {{files: [a]}}\noutput: {job_dir / 'o'}\n"
    )
    code, _, err = run(capsys, "queue", "work", str(job_dir / "nofn.yaml"))
    assert code == 2 and "names no 'function'" in err
    nope = write_spec(job_dir, "nope", "function: review_no_such_module:process")
    run(capsys, "queue", "submit", str(nope))
    code, _, err = run(capsys, "queue", "work", str(nope))
    assert code == 2 and "cannot import" in err
