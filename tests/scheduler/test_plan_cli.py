"""``spothop plan FILE``: the ranking with every factor, the spread, and why nothing fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.errors import EXIT_BAD_INPUT, EXIT_NOT_FOUND

BATCH_JOB = """\
name: embed-reviews
kind: batch
resources:
  accelerators: A10G:1
workers: 4
market: auto
run: python embed.py
batch: {inputs: [data.jsonl], output: out/}
"""


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(BATCH_JOB, encoding="utf-8")
    return path


def test_plan_json_ranks_with_every_factor_and_spreads_the_workers(
    job: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = _run(capsys, "plan", str(job), "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["job"] == "embed-reviews"
    assert plan["market_kinds"] == ["spot", "on-demand"]
    candidates = plan["candidates"]
    assert candidates and all(c["gpu"] == "A10G" and c["gpu_count"] == 1 for c in candidates)
    scores = [c["usd_per_useful_tflops_hour"] for c in candidates]
    assert scores == sorted(scores)
    for key in (
        "goodput",
        "preemption_rate_per_h",
        "checkpoint_interval_s",
        "boot_s",
        "egress_usd",
    ):
        assert key in candidates[0]["factors"]
    assert len(plan["spread"]) == 4
    assert len({(c["provider"], c["zone"]) for c in plan["spread"]}) >= 2
    assert plan["excluded"]["gpu"] > 0


def test_plan_prints_a_table_and_the_spread(
    job: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = _run(capsys, "plan", str(job), "--limit", "3")
    assert code == 0
    assert "$/useful-TFLOPS-h" in out and "goodput" in out and "spread for 4 node(s)" in out


def test_a_spec_nothing_satisfies_names_the_requirement_that_excluded_the_most(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(
        "name: big\nresources: {accelerators: 'A10G:8'}\nrun: python train.py\n", encoding="utf-8"
    )
    code, out, err = _run(capsys, "plan", str(path))
    assert code == EXIT_BAD_INPUT
    assert "Traceback" not in err and out == ""
    assert "no offering satisfies" in err and "excluded the most" in err
    assert "gpu" in err


def test_a_missing_job_file_is_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "plan", str(tmp_path / "none.yaml"))
    assert code == EXIT_NOT_FOUND and "does not exist" in err


def test_plan_does_not_create_the_store(
    job: Path, capsys: pytest.CaptureFixture[str], spothop_home: Path
) -> None:
    assert _run(capsys, "plan", str(job), "--json")[0] == 0
    assert not (spothop_home / "spothop.db").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00binary", "not a text"),
        (b"", "a job spec is a mapping"),
        (b"name: x\nrun: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_bad_job_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    code, _, err = _run(capsys, "plan", str(path))
    assert code == EXIT_BAD_INPUT and message in err and "Traceback" not in err


def test_a_folder_is_not_a_job_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "plan", str(tmp_path))
    assert code == EXIT_BAD_INPUT and "Traceback" not in err


def test_data_to_move_adds_egress_outside_its_region(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "plan", str(job), "--json", "--limit", "100")
    assert code == 0, err
    home = json.loads(out)["candidates"][0]
    where = f"{home['provider']}/{home['region']}"
    code, out, err = _run(
        capsys, "plan", str(job), "--json", "--limit", "100", "--data-gib", "50", "--data-at", where
    )
    assert code == 0, err
    moved = json.loads(out)["candidates"]
    assert all(
        (c["egress_usd"] == 0)
        == ((c["provider"], c["region"]) == (home["provider"], home["region"]))
        for c in moved
    )
    assert any(c["egress_usd"] > 0 for c in moved)


def test_data_without_a_place_is_refused(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "plan", str(job), "--data-gib", "5")
    assert code == EXIT_BAD_INPUT and "--data-at" in err


def test_plan_and_the_controller_read_a_spec_through_one_conversion() -> None:
    from spothop.jobs.controller.place import plan_inputs
    from spothop.jobs.spec import load_job
    from spothop.scheduler.market_view import MarketKind
    from spothop.scheduler.placement import DEFAULT_SAVE_S, ReservedPool

    spec = load_job(
        {
            "name": "train",
            "resources": {"accelerators": "A10G:1"},
            "market": "auto",
            "run": "python train.py",
            "reserved": [
                {"provider": "fake", "instance_type": "g5.xlarge", "zone": "fake-1a", "count": 2}
            ],
        }
    )
    profile, kinds, pools = plan_inputs(spec)
    assert kinds == (MarketKind.SPOT, MarketKind.ON_DEMAND, MarketKind.RESERVED)
    assert pools == (ReservedPool("fake", "g5.xlarge", "fake-1a", 2),)
    assert profile.checkpoint_interval_s is None and profile.save_s == DEFAULT_SAVE_S
    on_demand = spec.model_copy(update={"market": "on-demand", "reserved": ()})
    assert plan_inputs(on_demand).kinds == (MarketKind.ON_DEMAND,)
