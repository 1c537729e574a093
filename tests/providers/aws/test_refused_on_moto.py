"""With no AMI configured, a job on EC2 (moto's server) fails clearly, with no storm of launches.

No ``image_id``, no ``SPOTHOP_AWS_IMAGE_ID``, and moto holds no Deep Learning AMI parameter: every
launch is a ``ConfigError`` naming the fix. The controller stops trying EC2 after at most 2
launch calls and fails the job with that message, which ``status`` and ``jobs`` show.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller.loop import Controller
from spothop.jobs.lifecycle import EndReason, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.providers.aws.launch import IMAGE_ID_ENV
from spothop.providers.aws.provider import AwsProvider
from spothop.providers.base import Instance, LaunchRequest
from tests.providers.aws.moto_cloud import REGION, Ec2Market, fake_credentials, moto_server
from tests.providers.aws.test_controller_on_moto import run
from tests.waiting import wait_for

# The bound: from a configuration error to the job's clear failure.
MAX_LAUNCH_CALLS = 2


class Counting(AwsProvider):
    """The AWS adapter, counting its launch calls."""

    launch_calls = 0
    first_call_monotonic: float | None = None

    def launch(self, request: LaunchRequest) -> Instance:
        self.launch_calls += 1
        if self.first_call_monotonic is None:
            self.first_call_monotonic = time.monotonic()
        return super().launch(request)


@pytest.fixture
def setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[Controller, JobStore, Counting, str]]:
    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.delenv(IMAGE_ID_ENV, raising=False)
    with moto_server() as endpoint:
        provider = Counting(regions=[REGION], image_id=None, endpoint_url=endpoint)
        Ec2Market().attach(provider)
        url = f"sqlite:///{tmp_path / 'store.db'}"
        store = JobStore(url)
        # A control plane EC2's instances could reach (a loopback or database one is refused).
        controller = Controller(
            store,
            {"aws": provider},
            store_url=url,
            home=tmp_path,
            control_plane_url="https://spothop.example.com",
        )
        try:
            yield controller, store, provider, url
        finally:
            controller.close()
            store.close()


def _failed_job(controller: Controller, store: JobStore, name: str) -> str:
    """A one-GPU job on EC2 only, passes run until it fails; its id."""
    spec: dict[str, Any] = {
        "name": name,
        "run": "python train.py",
        "resources": {"accelerators": "A10G:1"},
        "providers": {"allow": ["aws"]},
        "regions": [REGION],
    }
    job_id = store.create_job(load_job(spec))

    def failed() -> bool:
        controller.run_pass()
        return store.get_job(job_id).state is JobState.FAILED

    wait_for(failed, timeout_s=60, what="the job to fail", interval_s=0.05)
    return job_id


def test_no_ami_fails_the_job_with_the_fix_after_at_most_two_launches(
    setup: tuple[Controller, JobStore, Counting, str],
) -> None:
    controller, store, provider, url = setup
    job_id = _failed_job(controller, store, "no-ami")
    assert provider.first_call_monotonic is not None
    took_s = time.monotonic() - provider.first_call_monotonic  # from the configuration error
    print(f"no AMI: {provider.launch_calls} launch call(s), failed in {took_s:.2f} s (target 5 s)")
    assert provider.launch_calls <= MAX_LAUNCH_CALLS  # the time is printed: tests assert no pace
    reason = store.get_job(job_id).reason
    assert IMAGE_ID_ENV in reason and "no AMI to launch" in reason
    assert all(a.end_reason is EndReason.LAUNCH_REFUSED for a in store.attempts(job_id))

    code, out, _ = run("status", job_id, "--store", url)
    flat = " ".join(out.split())  # the console wraps long lines
    assert code == 0 and "failed" in flat and IMAGE_ID_ENV in flat
    assert "launch refused in aws" in flat
    code, out, _ = run("jobs", "--store", url)
    flat = " ".join(out.split())
    assert code == 0 and f"{job_id} failed:" in flat and IMAGE_ID_ENV in flat


def test_motos_own_spot_prices_are_not_ranked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """moto answers USD 0.00001/h for every spot market: taken as missing, with a note."""
    from spothop.scheduler.market_view import gather_market_view
    from spothop.scheduler.placement import rank
    from tests.providers.aws.moto_cloud import in_process

    fake_credentials(monkeypatch, tmp_path)
    with in_process():
        provider = AwsProvider(regions=[REGION], image_id="ami-0123456789abcdef0")
        notes: list[str] = []
        view = gather_market_view([provider], on_note=notes.append)
    req = load_job({"name": "t", "run": "x", "resources": {"accelerators": "A10G:1"}})
    assert not rank(view, req.requirements(), kinds=["spot"]).candidates  # moto's are not ranked
    on_demand = rank(view, req.requirements(), kinds=["on-demand"]).candidates
    assert on_demand and on_demand[0].price_usd_per_hour > 0.5
    assert any(n.startswith("aws: ") and "cannot be true" in n for n in notes), notes


def test_an_instance_profile_that_does_not_exist_fails_the_job_naming_the_option(
    setup: tuple[Controller, JobStore, Counting, str],
) -> None:
    controller, store, provider, _url = setup
    provider.image_id = "ami-0123456789abcdef0"
    provider.instance_profile = "no-such-profile"
    job_id = _failed_job(controller, store, "no-profile")
    assert provider.launch_calls <= MAX_LAUNCH_CALLS
    reason = store.get_job(job_id).reason
    assert "no-such-profile" in reason and "SPOTHOP_AWS_INSTANCE_PROFILE" in reason, reason
