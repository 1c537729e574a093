"""Issue N's "Done when": an instance shares nothing with the controller but the network.

A job launched through the real controller onto an isolated local-cloud instance tries to open
the controller's store, its ``SPOTHOP_HOME``, the workdir's original folder and the project's
source tree: none is there. It still succeeds, with its code from the upload (its working
folder is the instance's own), spothop from the control plane's wheel (the boot log says so),
its output shown by ``spothop logs``. A wheel whose hash does not match stops the boot before
the agent starts, and ``spothop status`` says why.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spothop.providers.local.provider import LocalProvider
from tests.conftest import PROJECT_ROOT
from tests.jobs.e2e.conftest import Harness, script_job
from tests.waiting import wait_for

PROBE = """\
import os, sys
import spothop
for path in sys.argv[1:]:
    print(("SEEN " if os.path.exists(path) else "UNSEEN ") + path)
print("cwd " + os.getcwd())
print("spothop from " + os.path.dirname(spothop.__file__))
"""


def test_an_isolated_instance_sees_nothing_of_the_controller_and_its_job_succeeds(
    harness: Harness, tmp_path_factory: pytest.TempPathFactory
) -> None:
    h = harness
    project = tmp_path_factory.mktemp("project")  # the workdir's original: outside every bucket
    (project / "probe.py").write_text(PROBE)
    home = os.environ["SPOTHOP_HOME"]
    store_file = h.store_url.removeprefix("sqlite:///")
    hidden = [store_file, home, str(project), str(PROJECT_ROOT / "src" / "spothop")]
    job_id = h.launch({"name": "probe", **script_job(project / "probe.py", *hidden)})
    final = h.wait_final(job_id, 120, what="the probe job to end")
    assert str(final.state) == "succeeded", final
    code, text = h.cli("logs", job_id, "--store", h.store_url)
    assert code == 0, text
    for path in hidden:
        assert f"UNSEEN {path}\n" in text, text
    assert "SEEN " + home not in text.replace("UNSEEN ", "")
    assert "cwd /var/lib/spothop/workdir\n" in text  # the uploaded code, unpacked on the instance
    assert "spothop from /opt/spothop/" in text  # the wheel, installed at boot
    [instance] = [i for i in h.instances() if i.tags.get("spothop-job") == job_id]
    provider = h.providers[instance.provider]
    console = provider.console_output(instance.instance_id)
    control_plane = json.loads((Path(home) / "controller" / "controller.json").read_text())[
        "control_plane_url"
    ]
    assert "spothop: installed spothop " in console
    assert f"from {control_plane}/v1/dist/" in console and "/spothop-" in console
    assert "code: fetched 1 files" in console


def test_a_wheel_whose_hash_does_not_match_stops_the_boot_and_status_says_why(
    harness: Harness,
) -> None:
    h = harness
    h.start_controller()  # it builds the wheel its agent API serves, and its hash
    home = Path(os.environ["SPOTHOP_HOME"])
    [wheel] = list((home / "dist").glob("*/spothop-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"tampered")  # what the instance downloads now
    job_id = h.launch({"name": "never", "run": "echo never ran", "max_retries": 0})

    def failed_instance() -> dict[str, object] | None:
        data = h.status(job_id)
        ended = [i for i in data["instances"] if i["end_reason"] == "failed"]
        return ended[0] if ended else None

    failed = wait_for(failed_instance, 90, what="an instance failed at boot", interval_s=0.5)
    assert "boot script failed" in str(failed["end_detail"])
    assert "not starting the agent" in str(failed["end_detail"])
    code, text = h.cli("status", job_id, "--store", h.store_url)
    assert code == 0 and "not starting the agent" in text.replace("\n", " ")
    provider: LocalProvider = h.providers[str(failed["provider"])]
    console = provider.console_output(str(failed["instance_id"]))
    assert "expected" in console and "spothop-agent" not in console  # the agent never started
    h.cli("cancel", job_id, "--store", h.store_url)
