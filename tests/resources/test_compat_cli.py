"""``spothop gpus --compatible-with``: the matrix as a table and as JSON."""

from __future__ import annotations

from spothop.errors import EXIT_BAD_INPUT, EXIT_OK
from spothop.resources.gpus import gpu_catalog


def test_the_json_judges_every_model_with_its_reasons(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("gpus", "--compatible-with", "A100-SXM4-40GB", "--json")
    assert result.code == EXIT_OK, result.err
    data = result.json()
    assert data["source"] == "A100-SXM4-40GB"
    by_name = {t["target"]: t for t in data["targets"]}
    assert set(by_name) == {m.name for m in gpu_catalog()}
    assert by_name["H100-SXM5-80GB"]["ok"] is True
    assert by_name["V100-SXM2-16GB"]["reasons"] == [
        "A100-SXM4-40GB → V100-SXM2-16GB: architecture Volta is older than the checkpoint's Ampere"
    ]
    assert "vendor stack ROCm (AMD)" in by_name["MI300X"]["reasons"][0]
    assert data["accepted"] == sum(t["ok"] for t in data["targets"])


def test_the_table_shows_ok_and_refused_with_the_reason(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("gpus", "H100", "--compatible-with", "A100-SXM4-80GB", "--state-memory-gib", "85")
    assert result.code == EXIT_OK, result.err
    assert "may move to 1 of 3 GPU models" in result.out
    assert "80 GiB per GPU is less than the 85.0 GiB of state per GPU" in result.out
    assert "H100-NVL-94GB" in result.out and "ok" in result.out


def test_need_options_without_a_source_gpu_are_refused(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("gpus", "--min-compute-capability", "8.0")
    assert result.code == EXIT_BAD_INPUT
    assert "--compatible-with" in result.err


def test_bad_need_values_are_clear_errors(cli) -> None:  # type: ignore[no-untyped-def]
    bad_cc = cli("gpus", "--compatible-with", "A100", "--min-compute-capability", "eight")
    assert bad_cc.code == EXIT_BAD_INPUT and "MAJOR.MINOR" in bad_cc.err
    bad_arch = cli("gpus", "--compatible-with", "A100", "--min-architecture", "Fermi")
    assert bad_arch.code == EXIT_BAD_INPUT and "Hopper" in bad_arch.err
    unknown = cli("gpus", "--compatible-with", "A1OO")
    assert unknown.code == EXIT_BAD_INPUT


TASK = """\
name: finetune
resources: {min_gpu_memory_gib: 1}
market: auto
run: python train.py
checkpoint: {url: ckpt/}
"""


def _job(tmp_path):  # type: ignore[no-untyped-def]
    path = tmp_path / "job.yaml"
    path.write_text(TASK, encoding="utf-8")
    return str(path)


def test_plan_keeps_only_gpus_the_checkpoint_may_move_to(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    free = cli("plan", _job(tmp_path), "--json", "--limit", "1000").json()
    assert "T4" in {c["gpu"] for c in free["candidates"]}
    assert free["refused"] == {}
    result = cli(
        "plan", _job(tmp_path), "--checkpoint-gpu", "A100-SXM4-80GB", "--json", "--limit", "1000"
    )
    assert result.code == EXIT_OK, result.err
    plan = result.json()
    assert plan["requirements"]["checkpoint_gpu"] == "A100-SXM4-80GB"
    gpus = {c["gpu"] for c in plan["candidates"]}
    assert gpus and "T4" not in gpus
    assert plan["refused"]["T4"] == (
        "A100-SXM4-80GB → T4: architecture Turing is older than the checkpoint's Ampere"
    )
    text = cli("plan", _job(tmp_path), "--checkpoint-gpu", "A100-SXM4-80GB")
    assert "refused by the compatibility matrix: A100-SXM4-80GB → T4" in text.out


def test_plan_says_why_no_gpu_can_take_the_checkpoint(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = cli("plan", _job(tmp_path), "--checkpoint-gpu", "B200")
    assert result.code == EXIT_BAD_INPUT
    assert "compatibility matrix for a checkpoint made on B200" in result.err
    assert "is older than the checkpoint's Blackwell" in result.err
