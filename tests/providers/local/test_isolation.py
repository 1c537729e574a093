"""Isolated local instances: the boot script runs in a root that shows only the OS, the image and the buckets."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

import spothop
from spothop.controlplane.dist import build_wheel
from spothop.errors import ConfigError
from spothop.providers.base import Distribution, InstanceState, LaunchRequest
from spothop.providers.extensions import ConsoleOutput
from spothop.providers.local import isolation
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.waiting import scaled, wait_for

pytestmark = pytest.mark.skipif(
    isolation.unavailable() is not None, reason=f"no isolation here: {isolation.unavailable()}"
)

WORLD = """\
isolation: required
buckets: [{bucket}]
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    launch_delay_s: 0
    terminate_grace_s: 1
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {{mean_time_between_preemptions_s: 864000, mean_outage_s: 600}}
"""


@pytest.fixture
def cloud(tmp_path: Path, world_file, providers) -> tuple[LocalProvider, Path]:  # type: ignore[no-untyped-def]
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    path = world_file(WORLD.format(bucket=bucket))
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path)
    providers.append(provider)
    return provider, bucket


def _launch(provider: LocalProvider, script: str, **env: str):  # type: ignore[no-untyped-def]
    return provider.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=["bash", "-c", script],
            env=env,
        )
    )


def _ended(provider: LocalProvider, instance_id: str):  # type: ignore[no-untyped-def]
    ended = (InstanceState.TERMINATED, InstanceState.FAILED)
    instance = provider.wait(instance_id, ended, scaled(20))
    assert instance.state in ended, provider.console_output(instance_id)
    return instance


def test_an_isolated_instance_sees_the_image_and_buckets_and_nothing_of_the_controller(
    cloud, tmp_path: Path
) -> None:
    provider, bucket = cloud
    home = Path(os.environ["SPOTHOP_HOME"])
    (home / "secret.txt").write_text("the controller's")
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    (workdir / "train.py").write_text("print('the job')")
    source = Path(spothop.__file__)
    user_home = Path.home() / ".bashrc"
    checks = " ".join(
        f"[ -e {p} ] && echo SEEN {p} || echo ABSENT {p};"
        for p in (home / "secret.txt", source, workdir / "train.py", user_home)
    )
    script = (
        f"{checks} {sys.executable} -c 'print(\"python runs\")' && "
        f"echo from-the-instance > {bucket}/out.txt && ls /etc/spothop && echo $SPOTHOP_INSTANCE_ID"
    )
    instance = _launch(provider, script)
    ended = _ended(provider, instance.instance_id)
    console = provider.console_output(instance.instance_id)
    assert ended.state is InstanceState.TERMINATED, console
    assert "SEEN" not in console and console.count("ABSENT") == 4, console
    assert "python runs" in console and "agent.env" in console, console
    assert instance.instance_id in console  # read from the metadata endpoint by the boot script
    assert (bucket / "out.txt").read_text() == "from-the-instance\n"
    assert not Path("/etc/spothop/agent.env").exists() or "SPOTHOP_END" not in console
    row = provider.store.instance(instance.instance_id)
    assert row is not None and row["exit_code"] == 0


def test_the_boot_script_writes_its_own_etc_not_the_hosts(cloud) -> None:
    provider, _ = cloud
    before = Path("/etc/spothop").exists()
    instance = _launch(provider, "cat /etc/spothop/run.sh >/dev/null && echo wrote-etc")
    _ended(provider, instance.instance_id)
    assert "wrote-etc" in provider.console_output(instance.instance_id)
    assert Path("/etc/spothop").exists() == before
    assert not Path("/etc/systemd/system/spothop-agent.service").exists()


def test_the_unit_runs_through_the_shim_and_the_instance_ends_with_it(cloud) -> None:
    provider, bucket = cloud
    instance = _launch(
        provider,
        f"echo $$ > {bucket}/unit.pid; while [ ! -e {bucket}/stop ]; do sleep 0.05; done; exit 7",
    )
    wait_for(lambda: (bucket / "unit.pid").exists(), scaled(20))
    assert provider.describe(instance.instance_id).state is InstanceState.RUNNING
    (bucket / "stop").write_text("")
    ended = _ended(provider, instance.instance_id)
    row = provider.store.instance(instance.instance_id)
    assert ended.state is InstanceState.TERMINATED
    assert row is not None and row["exit_code"] == 7 and "code 7" in row["end_reason"]
    assert isinstance(provider, ConsoleOutput)


def test_terminate_ends_every_process_of_an_isolated_instance(cloud) -> None:
    provider, bucket = cloud
    instance = _launch(provider, f"(setsid sleep 300 & echo $! > {bucket}/child.pid); sleep 300")
    wait_for(lambda: (bucket / "child.pid").exists(), scaled(20))
    child = int((bucket / "child.pid").read_text())
    provider.terminate(instance.instance_id)
    ended = _ended(provider, instance.instance_id)
    assert ended.state is InstanceState.TERMINATED
    wait_for(lambda: not Path(f"/proc/{child}").exists(), scaled(10))


def test_a_failing_boot_script_ends_the_instance_with_its_reason(cloud, monkeypatch) -> None:
    provider, _ = cloud
    monkeypatch.setattr(
        "spothop.providers.local.userdata.NO_INSTALL", "echo 'install: no wheel here' >&2; exit 3"
    )
    instance = _launch(provider, "echo never")
    ended = _ended(provider, instance.instance_id)
    row = provider.store.instance(instance.instance_id)
    assert ended.state is InstanceState.FAILED
    assert row is not None and row["end_reason"] == "boot script failed: install: no wheel here"
    assert "never" not in provider.console_output(instance.instance_id)


def test_spothop_reaches_the_instance_as_the_control_planes_wheel(cloud, tmp_path: Path) -> None:
    provider, bucket = cloud
    built = build_wheel(tmp_path / "home")
    shutil.copy(built.path, bucket / built.filename)
    request = LaunchRequest(
        instance_type="g5.xlarge",
        region="us-east-1",
        zone="us-east-1a",
        bootstrap_command=[
            "python",
            "-c",
            "import spothop; print('agent-python', spothop.__file__)",
        ],
        distribution=Distribution(
            url=(bucket / built.filename).as_uri(), sha256=built.sha256, filename=built.filename
        ),
    )
    instance = provider.launch(request)
    ended = _ended(provider, instance.instance_id)
    console = provider.console_output(instance.instance_id)
    assert ended.state is InstanceState.TERMINATED, console
    assert f"spothop: installed spothop {spothop.__version__} from" in console, console
    assert "agent-python /opt/spothop/" in console, console


def test_a_wheel_whose_hash_does_not_match_fails_the_boot_and_says_why(cloud) -> None:
    provider, bucket = cloud
    wheel = bucket / "spothop-0.0.0-py3-none-any.whl"
    wheel.write_bytes(b"not the wheel the control plane vouched for")
    request = LaunchRequest(
        instance_type="g5.xlarge",
        region="us-east-1",
        zone="us-east-1a",
        bootstrap_command=["bash", "-c", "echo agent-started"],
        distribution=Distribution(url=wheel.as_uri(), sha256="0" * 64, filename=wheel.name),
    )
    instance = provider.launch(request)
    ended = _ended(provider, instance.instance_id)
    row = provider.store.instance(instance.instance_id)
    assert ended.state is InstanceState.FAILED
    assert row is not None and row["end_reason"].startswith(
        "boot script failed: spothop: the wheel"
    )
    assert "not starting the agent" in row["end_reason"]
    assert "agent-started" not in provider.console_output(instance.instance_id)


def test_a_credential_in_the_env_is_refused_before_anything_runs(cloud) -> None:
    provider, _ = cloud
    with pytest.raises(ConfigError, match="KEY_PEM"):
        _launch(provider, "true", KEY_PEM="-----BEGIN RSA PRIVATE KEY-----\nabc")
    assert provider.list_instances() == []


def test_a_missing_bucket_is_a_clear_error(world_file, tmp_path: Path) -> None:
    path = world_file(WORLD.format(bucket=tmp_path / "nope"))
    with pytest.raises(
        ConfigError, match=r"key buckets\.0: the folder .*nope does not exist; create it"
    ):
        load_world(path)


def test_the_world_names_its_image_and_buckets_relative_to_its_file(
    world_file, tmp_path: Path
) -> None:
    (tmp_path / "b").mkdir()
    world = load_world(
        world_file(WORLD.format(bucket="b").replace("buckets", "image: [b]\nbuckets"))
    )
    assert world.buckets == world.image_paths == ((tmp_path / "b").resolve(),)


def test_the_default_image_is_the_running_interpreter() -> None:
    world = load_world()
    assert Path(sys.prefix).resolve() in world.image_paths
    assert Path(sys.base_prefix).resolve() in world.image_paths
    assert world.buckets == ()


def test_an_unisolated_instance_runs_the_same_boot_script_in_its_own_folder(
    world_file, tmp_path: Path, providers
) -> None:
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    path = world_file(WORLD.format(bucket=bucket).replace("isolation: required", "isolation: off"))
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path)
    providers.append(provider)
    instance = _launch(provider, "ls $LOCAL_CLOUD_ROOT/etc/spothop && pwd")
    ended = _ended(provider, instance.instance_id)
    console = provider.console_output(instance.instance_id)
    assert ended.state is InstanceState.TERMINATED and "agent.env" in console, console
    directory = provider.store.instances_dir / instance.instance_id
    assert str(directory) in console
