"""The controller runs a job on EC2 (moto's server) as on any cloud: launch, a vanished instance, cancel, orphans.

moto runs no user-data, so no agent ever reports: what is exercised is the
controller's side — the attempt written before ``RunInstances``, an instance
terminated behind its back (as a preemption without notice looks) replaced,
the orphan reconciler ending a stray spothop instance of this store, and
cancel terminating what runs. The controller is given a control plane EC2's
instances could reach (a public URL); ``spothop launch`` with no server (the
embedded controller's loopback agent API) is refused before any instance.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller.loop import Controller
from spothop.jobs.controller.observe import TAG_JOB, TAG_STORE, TAG_TOKEN, store_tag
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from tests.providers.aws.moto_cloud import (
    IMAGE_ID,
    REGION,
    fake_credentials,
    make_provider,
    moto_server,
)
from tests.waiting import wait_for


@pytest.fixture
def setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[Controller, JobStore, Any, str]]:
    fake_credentials(monkeypatch, tmp_path)
    with moto_server() as endpoint:
        provider, _ = make_provider(endpoint_url=endpoint)
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


def run(*args: str) -> tuple[int, str, str]:
    """``spothop ARGS`` in this process: exit code, stdout, stderr."""
    import contextlib
    import io

    from spothop.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _alive(provider: Any, job_id: str) -> list[Any]:
    return [i for i in provider.find_instances({TAG_JOB: job_id}) if i.state.is_alive]


def test_a_job_on_ec2_is_launched_replaced_when_its_instance_vanishes_and_cancelled(
    setup: tuple[Controller, JobStore, Any, str],
) -> None:
    controller, store, provider, url = setup
    spec = load_job(
        {
            "name": "on-ec2",
            "run": "python train.py",
            "resources": {"accelerators": "A10G:1"},
            "providers": {"allow": ["aws"]},
            "regions": [REGION],
        }
    )
    job_id = store.create_job(spec)

    def passes_until(predicate: Any, what: str) -> Any:
        def one() -> Any:
            controller.run_pass()
            return predicate()

        return wait_for(one, timeout_s=60, what=what, interval_s=0.2)

    def launched() -> list[Any]:
        # Launches run beside the pass: the instance is up at the cloud a moment before its id
        # is stored on the attempt (the attempt row itself is written before the cloud call).
        alive = _alive(provider, job_id)
        stored = {a.instance_id for a in store.attempts(job_id)}
        return alive if alive and all(i.instance_id in stored for i in alive) else []

    (first,) = passes_until(launched, "the job's first instance, its id stored")
    assert first.region == REGION and first.instance_type.startswith("g")
    (attempt,) = store.attempts(job_id)
    assert attempt.instance_id == first.instance_id and attempt.provider == "aws"
    assert first.tags[TAG_STORE] == store_tag(url)

    provider.client(REGION).terminate_instances(InstanceIds=[first.instance_id])  # behind its back
    passes_until(
        lambda: [i for i in _alive(provider, job_id) if i.instance_id != first.instance_id],
        "a replacement for the vanished instance",
    )
    assert len(store.attempts(job_id)) >= 2

    stray = provider.client(REGION).run_instances(
        ImageId=IMAGE_ID,
        MinCount=1,
        MaxCount=1,
        InstanceType="g5.xlarge",
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": TAG_STORE, "Value": store_tag(url)},
                    {"Key": TAG_TOKEN, "Value": "no-attempt-has-this"},
                    {"Key": TAG_JOB, "Value": job_id},
                ],
            }
        ],
    )["Instances"][0]["InstanceId"]
    passes_until(
        lambda: not provider.describe(stray).state.is_alive, "the orphan reconciler to end it"
    )
    orphaned = [
        e.data["instance_id"] for e in store.events(job_id) if e.kind == "orphan_terminated"
    ]
    assert orphaned == [stray]  # the job's own instances are known, never orphans

    store.record_event(job_id, "cancel_requested", {"by": "test"})
    passes_until(lambda: not _alive(provider, job_id), "cancel to end every instance")
    passes_until(lambda: store.get_job(job_id).state.final, "the job to be final")


def test_spothop_launch_on_aws_without_a_server_is_refused_before_any_instance(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:

    import yaml

    from spothop.jobs.controller import daemon

    fake_credentials(monkeypatch, tmp_path)
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump(
            {
                "name": "ec2-job",
                "run": "python train.py",
                # moto's own spot prices (USD 0.00001/h) cannot be true: no spot market is ranked
                "market": "on-demand",
                "resources": {"accelerators": "A10G:1"},
                "providers": {"allow": ["aws"]},
                "regions": [REGION],
            }
        )
    )
    with moto_server() as endpoint:
        make_provider(endpoint_url=endpoint)  # moto's EC2 holds the image and subnets it needs
        for variable, value in {
            "SPOTHOP_PROVIDERS": "aws",
            "SPOTHOP_CATALOG_REFRESH_S": "0",  # moto has no Pricing API; the fixed catalog stays
            "SPOTHOP_AWS_ENDPOINT_URL": endpoint,
            "SPOTHOP_AWS_REGIONS": REGION,
            "SPOTHOP_AWS_IMAGE_ID": IMAGE_ID,
        }.items():
            monkeypatch.setenv(variable, value)
        # The embedded controller's agent API listens on this machine's loopback: EC2's
        # instances could not reach it, so `spothop launch` refuses the job before anything is
        # stored or paid for, naming the fix; no controller starts, no RunInstances.
        code, out, err = run("launch", str(job), "--detach", "--json", "--store", store_url)
        assert code != 0
        message = out + err
        assert "could not reach this machine's control plane" in message
        assert "spothop server run --public-url" in message
        assert "Traceback" not in message
        assert daemon.status() is None
        store = JobStore(store_url)
        try:
            assert store.list_jobs() == []
        finally:
            store.close()
