"""dstack task configurations map key by key; other types and keys are refused by name."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import JobSpecError
from spothop.jobs.spec import JobSpec, MarketChoice, load_job

DSTACK_TASK = """\
type: task
name: train-dstack
nodes: 2
image: nvcr.io/nvidia/pytorch:24.05-py3
env:
  - MODEL=llama
  - EPOCHS=3
working_dir: src
commands:
  - pip install -r requirements.txt
  - torchrun --nnodes $DSTACK_NODES_NUM train.py
resources:
  gpu: A100:80GB:8
  cpu: 32..
  memory: 256GB..
  disk: 500GB..
  shm_size: 16GB
spot_policy: auto
backends: [aws, gcp]
regions: [us-east-1]
max_retries: 2
retry:
  on_events: [interruption, error]
  duration: 1d
"""


def _load(text: str, tmp_path: Path, **kwargs: Any) -> JobSpec:
    path = tmp_path / ".dstack.yml"
    path.write_text(textwrap.dedent(text))
    return load_job(path, **kwargs)


def test_a_dstack_task_maps_key_by_key(tmp_path: Path) -> None:
    spec = _load(DSTACK_TASK, tmp_path)
    assert spec.name == "train-dstack" and spec.num_nodes == 2
    assert spec.image == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert spec.envs == {"MODEL": "llama", "EPOCHS": "3"}
    assert spec.run == (
        "cd src || exit\npip install -r requirements.txt\n"
        "torchrun --nnodes $DSTACK_NODES_NUM train.py"
    )
    r = spec.resources
    assert (r.gpu_name, r.gpu_count, r.min_gpu_memory_gib) == ("A100", 8, 80)
    assert (r.cpus, r.memory_gib, r.disk_size_gib) == (32, 256, 500)
    assert spec.market is MarketChoice.AUTO and spec.max_retries == 2
    assert spec.providers.allow == ["aws", "gcp"] and spec.regions == ["us-east-1"]


def _task(**fields: Any) -> dict[str, Any]:
    return {"type": "task", "name": "t", "commands": ["python x.py"], **fields}


def test_without_spot_policy_a_dstack_task_runs_on_demand() -> None:
    assert load_job(_task()).market is MarketChoice.ON_DEMAND
    assert load_job(_task(spot_policy="spot")).market is MarketChoice.SPOT


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        ("24GB", [(None, 1, 24.0)]),
        ("A100", [("A100", 1, None)]),
        ("A100:2", [("A100", 2, None)]),
        ("nvidia:A10G:1", [("A10G", 1, None)]),
        ("A100,H100:8", [("A100", 8, None), ("H100", 8, None)]),
        ("L4:1..2", [("L4", 1, None), ("L4", 2, None)]),
        ("40GB..:2", [(None, 2, 40.0)]),
        (
            {"name": ["A10G", "L4"], "memory": "24GB", "count": 1},
            [("A10G", 1, 24.0), ("L4", 1, 24.0)],
        ),
        (2, [(None, 2, None)]),
    ],
)
def test_every_gpu_form(gpu: Any, expected: list[tuple[Any, ...]]) -> None:
    spec = load_job(_task(resources={"gpu": gpu}))
    req = spec.requirements()
    shapes = req.alternatives or (req,)
    got = [(a.gpu, a.gpus_per_node, a.min_gpu_memory_gib) for a in shapes]
    assert got == expected


def test_a_bare_env_is_filled_from_launch_env_or_named() -> None:
    data = _task(env=["HF_TOKEN", "A=1"])
    with pytest.raises(JobSpecError, match=r"env\.HF_TOKEN.*--env HF_TOKEN=VALUE"):
        load_job(data)
    assert load_job(data, env={"HF_TOKEN": "x"}).envs == {"HF_TOKEN": "x", "A": "1"}
    assert load_job(_task(env={"B": None}), env={"B": "2"}).envs == {"B": "2"}


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        ({**_task(), "type": "service"}, "type", "service is a dstack configuration type"),
        ({**_task(), "type": "dev-environment"}, "type", "dstack tasks"),
        ({**_task(), "type": "banana"}, "type", "unknown configuration type"),
        (_task(files="data:/data"), "files", "a list of LOCAL:PATH"),
        (_task(files=["data:../up"]), "files.0", "climbs out"),
        (_task(files=[{"local_path": "data", "to": "/d"}]), "files.0.to", "not a field"),
        (_task(files=[{"path": "/d"}]), "files.0.local_path", "a local file or folder"),
        (_task(files=["a:/d", "b:/d"]), "files.1", "already the path"),
        (_task(ports=[8000]), "ports", "services"),
        (_task(max_price=1.5), "max_price", "budget_usd"),
        (_task(python="3.11"), "python", "setup"),
        (_task(retry=True), "retry", "max_retries"),
        (_task(resources={"gpu": "A100:40GB..80GB"}), "resources.gpu", "least size"),
        (_task(resources={"gpu": "A100:1..64"}), "resources.gpu", "count range"),
        (_task(resources={"gpu": "tpu-v5-8"}), "resources.gpu", "TPU"),
        (_task(resources={"gpu": 1.5j}), "resources.gpu", "A100:2"),
        (_task(resources={"cpu": "2..8"}), "resources.cpu", "least count"),
        (_task(resources={"memory": "lots"}), "resources.memory", "32GB"),
        (_task(resources={"tpu": 1}), "resources.tpu", "not taken"),
        (_task(commands="python x.py"), "commands", "list of shell commands"),
        (_task(spot_policy="cheap"), "spot_policy", "spot, on-demand or auto"),
    ],
)
def test_what_spothop_does_not_take_is_named(data: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(JobSpecError, match="dstack task") as caught:
        load_job(data)
    assert any(p == path and words in m for p, m in caught.value.problems), caught.value.problems


def test_a_dstack_value_still_meets_the_specs_checks() -> None:
    with pytest.raises(JobSpecError, match=r"unknown GPU 'A1000'"):
        load_job(_task(resources={"gpu": "A1000:1"}))
    with pytest.raises(JobSpecError, match=r"resources\.gpus_per_node"):
        load_job(_task(resources={"gpu": 0}))


def test_files_map_as_file_mounts_in_each_form(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "requirements.txt").write_text("torch\n")
    path = tmp_path / ".dstack.yml"
    path.write_text(
        "type: task\n"
        "commands: [python train.py]\n"
        "files:\n"
        "  - .:/workflow\n"
        "  - data:/data\n"
        "  - requirements.txt\n"
        "  - {local_path: data, path: ~/cache}\n"
    )
    spec = load_job(path)
    assert spec.file_mounts == {
        "/workflow": str(tmp_path),
        "/data": str(tmp_path / "data"),
        "requirements.txt": str(tmp_path / "requirements.txt"),
        "~/cache": str(tmp_path / "data"),
    }


def test_a_files_source_that_does_not_exist_is_named(tmp_path: Path) -> None:
    path = tmp_path / ".dstack.yml"
    path.write_text("type: task\ncommands: [ls]\nfiles: [missing:/data]\n")
    with pytest.raises(JobSpecError, match="does not exist"):
        load_job(path)
