"""SkyPilot task files launch unchanged where their keys map; a key spothop lacks is named, never dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spothop.errors import JobSpecError
from spothop.jobs.spec import MarketChoice, load_job

SKYPILOT_TASK = """\
name: train-llama
workdir: .
num_nodes: 1
resources:
  accelerators: A100:8
  use_spot: true
  cloud: AWS
  region: us-east-1
  cpus: 32+
  memory: 256+
  job_recovery:
    strategy: EAGER_NEXT_REGION
    max_restarts_on_errors: 3
envs:
  MODEL: llama
  EPOCHS: 3
setup: |
  pip install -r requirements.txt
run: |
  torchrun --nproc_per_node 8 train.py
"""


def test_a_skypilot_task_file_maps_onto_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # SkyPilot reads a relative workdir against the current folder
    path = tmp_path / "task.yaml"
    path.write_text(SKYPILOT_TASK)
    spec = load_job(path)
    assert spec.name == "train-llama" and spec.workdir == str(tmp_path)
    assert spec.resources.gpu_count == 8 and spec.resources.gpu_name == "A100"
    assert spec.resources.cpus == 32 and spec.resources.memory_gib == 256
    assert spec.market is MarketChoice.SPOT
    assert spec.providers.allow == ["aws"] and spec.regions == ["us-east-1"]
    assert spec.max_retries == 3
    assert spec.envs == {"MODEL": "llama", "EPOCHS": "3"}
    assert spec.run.startswith("torchrun")


def _sky(**resources: Any) -> dict[str, Any]:
    return {"name": "t", "run": "python x.py", "resources": resources}


def test_without_use_spot_a_skypilot_file_runs_on_demand_as_in_skypilot() -> None:
    assert load_job(_sky(cloud="gcp", accelerators="V100:1")).market is MarketChoice.ON_DEMAND


def test_infra_names_the_cloud_region_and_zone() -> None:
    spec = load_job(_sky(infra="aws/us-east-1/us-east-1a", use_spot=True))
    assert (spec.providers.allow, spec.regions, spec.zones) == (
        ["aws"],
        ["us-east-1"],
        ["us-east-1a"],
    )
    assert load_job(_sky(infra="*/us-west-2", use_spot=True)).providers.allow == []


def test_several_accelerators_become_alternatives() -> None:
    listed = load_job(_sky(accelerators=["A100:1", "H100:1"], use_spot=True)).resources
    assert [a.gpu_name for a in listed.any_of] == ["A100", "H100"]
    mapped = load_job(_sky(accelerators={"A10G": 1, "L4": 2}, use_spot=True)).resources
    assert [(a.gpu_name, a.gpu_count) for a in mapped.any_of] == [("A10G", 1), ("L4", 2)]


def test_any_of_entries_keep_their_places_and_mixed_markets_become_auto() -> None:
    spec = load_job(
        _sky(
            any_of=[
                {"accelerators": "A10G:1", "cloud": "aws", "use_spot": True},
                {"accelerators": "L4:1", "cloud": "gcp", "region": "us-central1"},
            ]
        )
    )
    first, second = spec.resources.any_of
    assert first.providers == ["aws"] and second.providers == ["gcp"]
    assert second.regions == ["us-central1"]
    assert spec.market is MarketChoice.AUTO


def test_spothops_own_fields_may_be_added_to_a_skypilot_file() -> None:
    spec = load_job({**_sky(use_spot=True, cloud="aws"), "tolerance": "conservative"})
    assert spec.tolerance == "conservative" and spec.market is MarketChoice.SPOT


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        (
            {**_sky(use_spot=True), "file_mounts": {"/d": {"name": "b"}}},
            "file_mounts./d.source",
            "would create",
        ),
        (_sky(use_spot=True, network_tier="best"), "resources.network_tier", "networks"),
        (
            _sky(use_spot=True, ordered=[{"any_of": []}]),
            "resources.ordered.0.any_of",
            "preference order",
        ),
        (
            _sky(ordered=[{"use_spot": True, "disk_size": 9}]),
            "resources.ordered.0.disk_size",
            "not taken in an ordered entry",
        ),
        (
            _sky(any_of=[{"use_spot": True, "image_id": "x"}]),
            "resources.any_of.0.image_id",
            "not taken in an any_of entry",
        ),
        ({**_sky(use_spot=True), "market": "on-demand"}, "market", "resources.use_spot"),
        (_sky(use_spot="yes"), "resources.use_spot", "true or false"),
        (_sky(job_recovery={"strategy": "PANIC"}), "resources.job_recovery.strategy", "PANIC"),
        (_sky(infra="aws/us-east-1", region="eu-west-1"), "resources.infra", "region"),
    ],
)
def test_an_unsupported_or_conflicting_key_is_named(
    data: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(JobSpecError, match="SkyPilot task file") as caught:
        load_job(data)
    assert any(p == path and words in m for p, m in caught.value.problems), caught.value.problems


def test_every_problem_of_a_skypilot_file_is_reported_at_once() -> None:
    data = {**_sky(use_spot=True, network_tier="best", ports=8080), "config": {"x": 1}}
    with pytest.raises(JobSpecError) as caught:
        load_job(data)
    assert {p for p, _ in caught.value.problems} == {
        "config",
        "resources.network_tier",
        "resources.ports",
    }


def test_skypilot_values_still_meet_the_specs_checks() -> None:
    with pytest.raises(JobSpecError, match=r"resources\.accelerators: unknown GPU 'A1000'"):
        load_job(_sky(use_spot=True, accelerators="A1000:1"))
