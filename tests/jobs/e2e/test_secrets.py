"""A job's secret reaches its worker and nowhere else, on a real local-cloud instance.

A SkyPilot task file declares ``secrets: {API_TOKEN: null}``; ``spothop launch --secret
API_TOKEN=…`` fills it. ``run`` checks the value (the job fails if it is not there), and
afterwards neither the instance's files (its boot script, ``instance.json``, the agent's
events, the worker's log), its console, the controller's home (the store, the job's logs)
nor anything the CLI printed holds the value: only its name.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import yaml

from tests.conftest import unique
from tests.jobs.e2e.conftest import Harness


def _holding(root: Path, value: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and value in p.read_bytes()]


def test_the_secret_is_in_runs_environment_and_in_no_file_console_or_output(
    harness: Harness,
) -> None:
    h = harness
    value = "tok_" + unique("secret")
    digest = hashlib.sha256(value.encode()).hexdigest()
    task = {
        "name": "secret-job",
        "resources": {"use_spot": True, "cloud": "aws-sim"},
        "secrets": {"API_TOKEN": None},
        # run compares a digest: the value is in no file, the job file included
        "run": f'[[ "$(printf %s "$API_TOKEN" | sha256sum | cut -d" " -f1)" == "{digest}" ]]'
        ' || { echo "no secret"; exit 1; }\n'
        'echo "the secret is here: ${#API_TOKEN} characters"\n',
    }
    path = h.tmp / "secret.yaml"
    path.write_text(yaml.safe_dump(task))
    code, out = h.cli(
        "launch",
        str(path),
        "--detach",
        "--json",
        "--secret",
        f"API_TOKEN={value}",
        *h.launch_args(),
    )
    assert code == 0, out
    job_id = json.loads(out)["job_id"]
    final = h.wait_final(job_id, 120, what="the secret job to end")
    assert str(final.state) == "succeeded", final
    code, logs = h.cli("logs", job_id, "--store", h.store_url)
    assert "the secret is here: " in logs, logs
    printed = out + logs + h.cli("status", job_id, "--store", h.store_url)[1]
    printed += h.cli("status", job_id, "--json", "--store", h.store_url)[1]
    printed += h.cli("events", "--job", job_id, "--store", h.store_url)[1]
    assert "API_TOKEN" in printed and value not in printed
    secret = value.encode()
    [instance] = [i for i in h.instances() if i.tags.get("spothop-job") == job_id]
    provider = h.providers[instance.provider]
    row = provider.store.instance(instance.instance_id)
    assert row is not None
    instance_root = Path(row["directory"])
    assert list(instance_root.rglob("instance.json"))  # the files looked into are there
    assert _holding(instance_root, secret) == []
    assert secret not in provider.console_output(instance.instance_id).encode()
    assert _holding(Path(os.environ["SPOTHOP_HOME"]), secret) == []
