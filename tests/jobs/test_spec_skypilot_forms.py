"""Every ``resources`` form SkyPilot documents plans as its author meant it; what spothop does not
take is one clear line naming the key, never "not valid YAML" or a dropped requirement."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from spothop.cli.job_file import env_overrides
from spothop.errors import ConfigError, JobSpecError
from spothop.jobs.spec import JobSpec, MarketChoice, load_job


def _file(tmp_path: Path, text: str) -> JobSpec:
    path = tmp_path / "task.yaml"
    path.write_text(textwrap.dedent(text))
    return load_job(path)


def _gpus(spec: JobSpec) -> list[tuple[str | None, int | None]]:
    return [(a.gpu, a.gpus_per_node) for a in spec.requirements().alternatives]


# -- accelerator sets: alternatives, in either dialect ---------------------------------------


@pytest.mark.parametrize(
    "accelerators",
    ["[L4:1, A10G:1]", "{L4: 1, A10G: 1}", "{L4:1, A10G:1}", "['L4:1', 'A10G:1']"],
)
@pytest.mark.parametrize("extra", ["", "  use_spot: true\n", "  memory: 8+\n"])
def test_a_set_of_gpus_is_alternatives_whatever_else_the_file_holds(
    tmp_path: Path, accelerators: str, extra: str
) -> None:
    spec = _file(
        tmp_path, f"name: t\nrun: python x.py\nresources:\n  accelerators: {accelerators}\n{extra}"
    )
    assert _gpus(spec) == [("L4", 1), ("A10G", 1)]


def test_a_set_beside_any_of_gives_each_gpu_in_each_entry_once(tmp_path: Path) -> None:
    spec = _file(
        tmp_path,
        """\
        name: t
        run: python x.py
        resources:
          accelerators: {T4: 1, L4: 1}
          any_of:
            - use_spot: true
            - use_spot: false
        """,
    )
    # Never empty alternatives ranking any GPU: each GPU of the set in each entry, each entry in
    # its own market.
    assert _gpus(spec) == [("T4", 1), ("L4", 1), ("T4", 1), ("L4", 1)]
    markets = [a.market for a in spec.requirements().alternatives]
    assert markets == ["spot", "spot", "on-demand", "on-demand"]
    assert spec.market is MarketChoice.AUTO


def test_an_any_of_entry_may_give_its_own_set_and_places(tmp_path: Path) -> None:
    spec = _file(
        tmp_path,
        """\
        name: t
        run: python x.py
        resources:
          use_spot: true
          any_of:
            - {accelerators: [A100:8, H100:8], cloud: aws}
            - {accelerators: L4:1, infra: gcp/us-central1}
        """,
    )
    alternatives = spec.requirements().alternatives
    assert [(a.gpu, a.gpus_per_node, a.providers_allow) for a in alternatives] == [
        ("A100", 8, ("aws",)),
        ("H100", 8, ("aws",)),
        ("L4", 1, ("gcp",)),
    ]
    assert alternatives[2].regions == ("us-central1",)


@pytest.mark.parametrize(
    ("accelerators", "words"),
    [
        ({"A10G": 0}, "the GPU count"),
        ({"A10G": 1, "L4": 0}, "the GPU count"),
        ([], "names no GPU"),
        ({}, "names no GPU"),
        (["A10G:1", "NOPE:1"], "unknown GPU 'NOPE'"),
    ],
)
def test_a_bad_set_is_refused_naming_its_key(accelerators: Any, words: str) -> None:
    data = {"name": "t", "run": "x", "resources": {"accelerators": accelerators}}
    with pytest.raises(JobSpecError, match=r"resources\.(any_of\.\d\.)?accelerators") as caught:
        load_job(data)
    assert words in str(caught.value)


# -- the market: SkyPilot's default, whatever other keys are present -------------------------


@pytest.mark.parametrize("extra", [{}, {"memory": "8+"}, {"cpus": "4+"}, {"disk_size": 100}])
def test_a_skypilot_file_without_use_spot_runs_on_demand(extra: dict[str, Any]) -> None:
    data = {"name": "t", "run": "x", "resources": {"cloud": "aws", "accelerators": "T4:1", **extra}}
    assert load_job(data).market is MarketChoice.ON_DEMAND
    data["resources"]["use_spot"] = True
    assert load_job(data).market is MarketChoice.SPOT


@pytest.mark.parametrize("extra", [{}, {"memory": "8+"}, {"cpus": "4+"}])
def test_keys_both_spell_alike_do_not_change_the_market(extra: dict[str, Any]) -> None:
    data = {"name": "t", "run": "x", "resources": {"accelerators": "T4:1", **extra}}
    assert load_job(data).market is MarketChoice.SPOT  # a spothop job file: spothop's default


def test_memory_is_memory_gib(tmp_path: Path) -> None:
    assert (
        load_job({"name": "t", "run": "x", "resources": {"memory": "32+"}}).resources.memory_gib
        == 32
    )
    with pytest.raises(JobSpecError, match="say the same"):
        load_job({"name": "t", "run": "x", "resources": {"memory": 8, "memory_gib": 8}})


# -- workdir, disks, images -------------------------------------------------------------------


def test_a_relative_workdir_is_the_current_folders_as_in_skypilot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here" / "code").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    path = tmp_path / "files" / "task.yaml"
    path.write_text("run: x\nworkdir: code\nresources: {use_spot: true}\n")
    assert load_job(path).workdir == str(tmp_path / "here" / "code")


def test_disk_size_and_tier_are_recorded() -> None:
    spec = load_job(_sky(disk_size=256, disk_tier="HIGH"))
    assert (spec.resources.disk_size_gib, spec.resources.disk_tier) == (256, "high")
    assert JobSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("resources", "path", "words"),
    [
        ({"disk_size": -5}, "resources.disk_size", "whole number of 1 or more"),
        ({"disk_size": 0}, "resources.disk_size", "whole number of 1 or more"),
        ({"disk_size": 100_000}, "resources.disk_size_gib", "65536"),
        ({"disk_tier": None, "disk_size": 10.5}, "resources.disk_size", "10.5"),
        ({"disk_tier": "turbo"}, "resources.disk_tier", "turbo"),
        ({"image_id": "docker:my image"}, "resources.image_id", "no spaces"),
        ({"image_id": "ami-0123456789"}, "resources.image_id", "docker:IMAGE"),
        ({"image_id": "ami 0123", "cloud": "aws"}, "resources.image_id", "machine image id"),
        ({"image_id": {"us-east-1": 7}, "cloud": "aws"}, "resources.image_id", "an image id"),
    ],
)
def test_bad_disks_and_images_are_refused_with_the_key(
    resources: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(JobSpecError, match=path.replace(".", r"\.")) as caught:
        load_job(_sky(**resources))
    assert words in str(caught.value)


def test_a_docker_image_id_is_the_jobs_image() -> None:
    assert load_job(_sky(image_id="docker:nvcr.io/nvidia/pytorch:24.05-py3")).image == (
        "nvcr.io/nvidia/pytorch:24.05-py3"
    )


def _sky(**resources: Any) -> dict[str, Any]:
    return {"name": "t", "run": "python x.py", "resources": {"use_spot": True, **resources}}


# -- envs a user must give --------------------------------------------------------------------


def test_a_null_env_is_filled_from_launch_env_or_named(tmp_path: Path) -> None:
    text = "run: x\nresources: {use_spot: true}\nenvs:\n  HF_TOKEN:\n  MODEL: small\n  EMPTY: ''\n"
    path = tmp_path / "task.yaml"
    path.write_text(text)
    with pytest.raises(JobSpecError) as caught:
        load_job(path)
    assert {p for p, _ in caught.value.problems} == {"envs.HF_TOKEN", "envs.EMPTY"}
    assert "--env HF_TOKEN=VALUE" in str(caught.value)
    spec = load_job(path, env={"HF_TOKEN": "t0k", "EMPTY": "x", "MODEL": "big"})
    assert spec.envs == {"HF_TOKEN": "t0k", "MODEL": "big", "EMPTY": "x"}


def test_launch_env_takes_name_value_or_this_shells_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", "from-shell")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    assert env_overrides(["A=1=2", "HF_TOKEN", "B="]) == {
        "A": "1=2",
        "HF_TOKEN": "from-shell",
        "B": "",
    }
    with pytest.raises(ConfigError, match="--env NOT_SET_HERE: not set in this shell"):
        env_overrides(["NOT_SET_HERE"])
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        env_overrides(["1X=2"])


def test_a_spothop_file_null_env_names_launch_env() -> None:
    with pytest.raises(JobSpecError, match=r"envs\.TOKEN.*--env NAME=VALUE"):
        load_job({"name": "t", "run": "x", "envs": {"TOKEN": None}})
    assert load_job({"name": "t", "run": "x"}, env={"A": "1"}).envs == {"A": "1"}


# -- out of scope: one clear line each --------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        ({**_sky(), "service": {"readiness_probe": "/"}}, "service", "SkyServe"),
        (_sky(ports=8080), "resources.ports", "services"),
        ({**_sky(), "config": {"jobs": {}}}, "config", "spothop's options"),
        (_sky(accelerators="tpu-v4-8"), "resources.accelerators", "TPU"),
        (_sky(accelerators={"tpu-v5e-16": 1}), "resources.accelerators", "TPU"),
        (_sky(cloud="kubernetes"), "resources.cloud", "Kubernetes"),
        (_sky(infra="k8s/my-context"), "resources.infra", "Kubernetes"),
        (_sky(ordered=[{"ordered": []}]), "resources.ordered.0.ordered", "one any_of"),
        (_sky(any_of=[{"any_of": []}]), "resources.any_of.0.any_of", "one any_of"),
        (
            {**_sky(), "file_mounts": {"/d": {"source": "s3://b", "mode": "SYNC"}}},
            "file_mounts./d.mode",
            "MOUNT, COPY",
        ),
        ({**_sky(), "service": {"replicas": 2}}, "service", "SkyServe"),
        ({**_sky(), "workdir": {"url": "https://x/r.git", "ref": "main"}}, "workdir", "clone"),
    ],
)
def test_what_spothop_does_not_take_is_one_clear_line(
    data: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(JobSpecError, match="SkyPilot task file") as caught:
        load_job(data)
    assert any(p == path and words in m for p, m in caught.value.problems), caught.value.problems


def test_several_yaml_documents_are_a_chain_not_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "chain.yaml"
    path.write_text("name: pipeline\n---\nrun: echo a\n---\nrun: echo b\n")
    with pytest.raises(JobSpecError, match="3 YAML documents") as caught:
        load_job(path)
    assert "not valid YAML" not in str(caught.value)


def test_a_tpu_in_a_spothop_file_is_named_a_tpu_not_an_unknown_gpu() -> None:
    with pytest.raises(JobSpecError, match=r"'tpu-v4-8' is a TPU: spothop runs GPU instances only"):
        load_job({"name": "t", "run": "x", "resources": {"accelerators": "tpu-v4-8"}})
