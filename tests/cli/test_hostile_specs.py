"""Specs that validate but could never run as asked are refused before anything is stored:
a cloud credential in ``envs`` (named, never shown), a value exec cannot take, a deadline shorter
than the work, a budget below the cheapest launch. Both fronts call these checks (``plan`` and
``launch``; the server's ``POST /v1/jobs`` through ``check_launchable``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spothop.errors import JobSpecError
from spothop.jobs.spec import load_job
from spothop.service.launch import ENV_ENTRY_MAX_BYTES, check_budget, check_spec

Cli = Callable[..., Any]
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", SECRET),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json"),
        ("MY_KEY_ID", "AKIAABCDEFGHIJKLMNOP"),
    ],
)
def test_a_cloud_credential_in_envs_is_refused_naming_it_never_showing_it(
    name: str, value: str
) -> None:
    spec = load_job({"name": "a", "run": "true", "envs": {name: value}})
    with pytest.raises(JobSpecError) as refused:
        check_spec(spec)
    assert name in str(refused.value) and value not in str(refused.value)
    assert refused.value.problems[0][0] == "envs"


def test_a_user_secret_that_is_no_cloud_credential_is_accepted() -> None:
    check_spec(load_job({"name": "a", "run": "true", "envs": {"HF_TOKEN": "hf_abc"}}))


@pytest.mark.parametrize("command", ["plan", "launch"])
def test_plan_and_launch_refuse_a_credential_and_store_nothing(
    cli: Cli, tmp_path: Path, spothop_home: Path, command: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(f"name: a\nrun: 'true'\nenvs: {{AWS_SECRET_ACCESS_KEY: {SECRET}}}\n")
    args = [command, str(job)] + (["--detach"] if command == "launch" else [])
    result = cli(*args)
    assert result.code == 2 and "AWS_SECRET_ACCESS_KEY" in result.err
    assert SECRET not in result.out + result.err
    assert not (spothop_home / "spothop.db").exists()


def test_an_env_value_exec_cannot_take_is_refused() -> None:
    big = "x" * ENV_ENTRY_MAX_BYTES
    with pytest.raises(JobSpecError, match=r"envs\.BIG: .*E2BIG"):
        check_spec(load_job({"name": "a", "run": "true", "envs": {"BIG": big}}))
    check_spec(load_job({"name": "a", "run": "true", "envs": {"OK": big[:100_000]}}))
    many = {f"V{i}": big[:100_000] for i in range(11)}  # each fits, all together do not
    with pytest.raises(JobSpecError, match=r"envs: .* bytes in all"):
        check_spec(load_job({"name": "a", "run": "true", "envs": many}))


@settings(max_examples=60, deadline=None)
@given(
    work_s=st.floats(min_value=1, max_value=365 * 86400),
    deadline_s=st.floats(min_value=1, max_value=365 * 86400),
)
def test_a_deadline_shorter_than_the_work_is_refused_with_the_figures(
    work_s: float, deadline_s: float
) -> None:
    spec = load_job({"name": "a", "run": "true", "work": work_s, "deadline": deadline_s})
    if deadline_s >= work_s:
        check_spec(spec)
        return
    with pytest.raises(JobSpecError) as refused:
        check_spec(spec)
    assert refused.value.problems[0][0] == "deadline" and "less than the job's work" in str(
        refused.value
    )


def test_the_issue_s_one_second_deadline_for_an_hour_of_work_is_refused(
    cli: Cli, tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nrun: 'true'\ndeadline: 1s\nwork: 1h\n")
    result = cli("plan", str(job))
    assert result.code == 2 and "deadline: 1 s is less than the job's work (1 h)" in result.err


@settings(max_examples=60, deadline=None)
@given(
    budget=st.floats(min_value=1e-6, max_value=1e4),
    price=st.floats(min_value=0.01, max_value=100),
    nodes=st.integers(min_value=1, max_value=8),
)
def test_a_budget_below_the_cheapest_launch_is_refused(
    budget: float, price: float, nodes: int
) -> None:
    spec = load_job({"name": "a", "run": "true", "budget_usd": budget, "num_nodes": nodes})
    least = price * nodes * 60 / 3600
    if least <= budget:
        check_budget(spec, [price, price * 2])
        return
    with pytest.raises(JobSpecError, match=r"budget_usd: .* less than the cheapest launch"):
        check_budget(spec, [price, price * 2])


@pytest.mark.parametrize("command", ["plan", "launch"])
def test_plan_and_launch_refuse_the_issue_s_budget_of_a_hundredth_of_a_cent(
    cli: Cli, tmp_path: Path, spothop_home: Path, command: str
) -> None:
    # plan once ranked such a job and exited 0, and only launch refused it
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nrun: 'sleep 20'\nbudget_usd: 0.0001\n")
    result = cli(command, str(job), *(["--detach"] if command == "launch" else []))
    assert result.code == 2 and "budget_usd: $0.0001 is less than" in result.err


def test_launch_refuses_an_unreachable_queue_url_and_stores_nothing(
    cli: Cli, tmp_path: Path, spothop_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spothop.providers import registry
    from spothop.testing import FakeProvider

    bucket = tmp_path / "bucket"
    bucket.mkdir()
    (bucket / "in.jsonl").write_text('{"a": 1}\n')
    provider = FakeProvider(bucket_paths=[bucket])
    monkeypatch.setattr(registry, "default_providers", lambda *_: {provider.name: provider})
    monkeypatch.setenv("SPOTHOP_QUEUE_RETRY_S", "0.5")
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: b\nkind: batch\nrun: python w.py\n"
        "batch: {inputs: [bucket/in.jsonl], output: bucket/out}\n"
    )
    result = cli("launch", str(job), "--detach", "--queue-url", "redis://127.0.0.1:1/0")
    assert result.code == 4 and "--queue-url: " in result.err and "nothing was stored" in result.err
    assert not (spothop_home / "spothop.db").exists()
