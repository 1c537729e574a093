"""A job's ``image:``: the real clouds' boot scripts run the worker in it, the agent on the host;
the local cloud refuses it by name."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from spothop.errors import ConfigError, JobSpecError, ProviderError
from spothop.jobs.spec import load_job
from spothop.providers.aliyun.userdata import render_user_data as aliyun_user_data
from spothop.providers.aws.userdata import render_user_data as aws_user_data
from spothop.providers.container import in_container
from spothop.providers.gcp.userdata import render_startup_script as gcp_startup_script
from tests.providers.conftest import _local

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
AGENT = ("python", "-m", "spothop.agent", "run", "--job-id", "j1")
WORKER = ("sh", "-c", "echo hi && python train.py")
COMMAND = (*AGENT, "--", *WORKER)
ENV = {"SPOTHOP_AGENT_TOKEN": "tok", "MY_VAR": "x y", "SPOTHOP_HOME": "/srv/home"}
RENDERERS: dict[str, Callable[..., str]] = {
    "aws": aws_user_data,
    "gcp": gcp_startup_script,
    "aliyun": aliyun_user_data,
}


def _exec_line(script: str) -> list[str]:
    line = next(x for x in script.splitlines() if x.startswith("exec "))
    return shlex.split(line)[1:]


@pytest.mark.parametrize("cloud", sorted(RENDERERS))
def test_the_boot_script_runs_the_worker_in_the_image_and_the_agent_on_the_host(cloud: str) -> None:
    script = RENDERERS[cloud](COMMAND, ENV, image=IMAGE)
    argv = _exec_line(script)
    cut = argv.index("--")
    assert tuple(argv[:cut]) == AGENT  # the agent itself is not in the container
    shell, flag, docker, name, *worker = argv[cut + 1 :]
    assert (shell, flag, name, tuple(worker)) == ("sh", "-c", "spothop-container", WORKER)
    assert docker.startswith("exec docker run --rm --init --gpus all --network host")
    assert '-v "$SPOTHOP_AGENT_DIR:$SPOTHOP_AGENT_DIR"' in docker
    for passed in ("MY_VAR", "SPOTHOP_JOB_ID", "SPOTHOP_AGENT_DIR", "SPOTHOP_CHECKPOINT_URL"):
        assert f"-e {passed} " in docker
    assert "SPOTHOP_AGENT_TOKEN" not in docker  # the agent's credential stays with the agent
    assert "x y" not in docker  # values pass by name, never on a command line
    assert docker.endswith(f'{IMAGE} "$@"')
    assert "command -v docker" in script and IMAGE in script.split("command -v docker")[1]


@pytest.mark.parametrize("cloud", sorted(RENDERERS))
def test_without_an_image_the_boot_script_has_no_docker(cloud: str) -> None:
    script = RENDERERS[cloud](COMMAND, ENV)
    assert "docker" not in script
    assert tuple(_exec_line(script)) == COMMAND


@pytest.mark.parametrize("cloud", sorted(RENDERERS))
def test_an_image_needs_a_worker_after_the_double_dash(cloud: str) -> None:
    with pytest.raises(ConfigError, match="no worker after '--'"):
        RENDERERS[cloud](AGENT, ENV, image=IMAGE)


def test_the_wrapped_worker_calls_docker_with_its_arguments_intact(tmp_path: Path) -> None:
    # A stand-in docker on PATH records what it was called with: the real shell quoting, run.
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    record = tmp_path / "argv.json"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    wrapped = in_container(COMMAND, IMAGE, ENV)
    worker = wrapped[wrapped.index("--") + 1 :]
    env = {
        "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
        "SPOTHOP_AGENT_DIR": str(tmp_path / "it's control"),
        "SPOTHOP_HOME": str(tmp_path / "home"),
    }
    subprocess.run(worker, env=env, check=True, timeout=30)
    argv = json.loads(record.read_text())
    control, home = env["SPOTHOP_AGENT_DIR"], env["SPOTHOP_HOME"]
    assert argv[:2] == ["run", "--rm"]
    assert ["-v", f"{control}:{control}"] == argv[argv.index("-v") : argv.index("-v") + 2]
    assert f"{home}:{home}" in argv
    assert argv[-len(WORKER) - 1 :] == [IMAGE, *WORKER]


def test_no_home_no_home_mount(tmp_path: Path) -> None:
    wrapped = in_container(COMMAND, IMAGE, ())
    script = wrapped[wrapped.index("--") + 3]
    out = subprocess.run(
        ["sh", "-c", script.replace("exec docker", "printf '%s\\n' docker"), "x", "w"],
        env={"PATH": os.environ["PATH"], "SPOTHOP_AGENT_DIR": "/c"},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split("\n")
    assert out.count("-v") == 1 and "/c:/c" in out


def test_a_bad_image_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="not a container image reference"):
        in_container(COMMAND, "bad image; rm -rf /", ())


def test_the_spec_carries_the_image_and_refuses_a_bad_one() -> None:
    assert load_job({"name": "j", "run": "true", "image": IMAGE}).image == IMAGE
    assert load_job({"name": "j", "run": "true"}).image is None
    with pytest.raises(JobSpecError, match="image"):
        load_job({"name": "j", "run": "true", "image": "two words"})


def test_the_local_cloud_refuses_an_image_naming_the_option(tmp_path: Path) -> None:
    harnesses = _local(tmp_path)
    harness = next(harnesses)
    try:
        with pytest.raises(ProviderError, match=r"image:.*option|no container runtime"):
            harness.provider.launch(dataclasses.replace(harness.spot, image=IMAGE))
        assert harness.provider.list_instances() == []
    finally:
        harnesses.close()
