"""A launching process killed between recording an instance and starting its host.

A controller SIGKILLed mid-launch can stop right after the local cloud recorded
the instance (``pending``, tagged with the attempt's token) and before it started
the instance's host. No host will ever boot it; the restarted controller adopts
it by its token. The cloud must fail it when it is next listed, as a cloud fails
a VM that cannot boot, or the node waits for a boot that never comes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from spothop.providers.base import InstanceState
from spothop.providers.local import boot
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world

# Launches one instance and dies (as from SIGKILL) where the host would have been started.
KILLED_MID_LAUNCH = textwrap.dedent(
    """
    import os
    from spothop.providers import local
    from spothop.providers.base import LaunchRequest
    from spothop.providers.local import provider as module
    from spothop.providers.local.world import load_world

    def killed(*args, **kwargs):
        os._exit(9)

    module.start_host = killed
    module.LocalProvider("aws-sim", world=load_world()).launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=["true"],
            tags={"spothop-launch-token": "t-1"},
        )
    )
    """
)


def test_an_instance_whose_launcher_died_before_its_host_started_is_failed_when_listed() -> None:
    done = subprocess.run([sys.executable, "-c", KILLED_MID_LAUNCH], check=False, timeout=60)
    assert done.returncode == 9
    provider = LocalProvider("aws-sim", world=load_world())
    [instance] = provider.list_instances()
    assert instance.tags["spothop-launch-token"] == "t-1"
    assert instance.state is InstanceState.FAILED
    row = provider.store.instance(instance.instance_id)
    assert row is not None and "never started" in row["end_reason"]


def test_a_record_whose_launcher_still_runs_is_left_to_it(tmp_path: Path) -> None:
    (tmp_path / "instance.json").write_text(json.dumps({"launcher_pid": os.getpid()}))
    assert not boot.host_never_started(tmp_path)
    assert boot.host_never_started(tmp_path, now_wall_s=9e12)  # its time to start long past
    assert not boot.host_never_started(tmp_path / "missing")
