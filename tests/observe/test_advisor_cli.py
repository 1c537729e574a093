"""spothop advise JOB on the local world's markets: the options, a recommendation, bad input."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from spothop.cli.main import main
from tests.jobs.e2e.conftest import WORLD


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    world = tmp_path / "world.yaml"
    world.write_text(yaml.safe_dump(WORLD))
    monkeypatch.setenv("SPOTHOP_WORLD", str(world))
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "advised", "run": "python train.py", "num_nodes": 2}))
    return path


def test_advise_a_job_file(job: Path) -> None:
    code, out = _cli("advise", str(job), "--work-h", "3", "--runs", "50", "--json")
    assert code == 0, out
    advice = json.loads(out)
    names = [o["name"] for o in advice["options"]]
    assert names[0] == "on-demand" and "spot/balanced" in names
    assert advice["recommended"] in names and advice["reason"]
    assert advice["nodes"] == 2
    for o in advice["options"]:
        c = o["cost_microusd"]
        assert c["p10"] <= c["mean"] <= c["p90"]
    code, out = _cli("advise", str(job), "--work-h", "3", "--runs", "20", "--reserved-price", "0.5")
    assert code == 0, out
    assert "reserved+spot" in out and "recommended:" in out


def test_bad_input(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _cli("advise")
    assert code == 2
    assert "job file" in capsys.readouterr().err
    code, _ = _cli("advise", "--usage", str(job))
    assert code == 2
    assert "--reserved-price" in capsys.readouterr().err
