"""spothop.worker.world(): the group's shape from the launcher's environment, a world of one outside."""

from __future__ import annotations

import subprocess
import sys

import pytest

import spothop
from spothop.errors import ConfigError
from spothop.worker import World, WorldConfigError, world


def test_outside_spothop_it_is_a_world_of_one() -> None:
    shape = world({})
    assert shape == World(rank=0, local_rank=0)
    assert (shape.node_rank, shape.nnodes, shape.nproc_per_node, shape.world_size) == (0, 1, 1, 1)
    assert shape.generation == 0 and not shape.distributed and not shape.under_spothop
    assert shape.init_method == "tcp://127.0.0.1:29500"


def test_the_launchers_contract_gives_node_shape_and_generation() -> None:
    env = {
        "MASTER_ADDR": "10.0.0.4",
        "MASTER_PORT": "31007",
        "NODE_RANK": "1",
        "NNODES": "2",
        "NPROC_PER_NODE": "2",
        "WORLD_SIZE": "4",
        "SPOTHOP_NODE_RANK": "1",
        "SPOTHOP_NNODES": "2",
        "SPOTHOP_NPROC_PER_NODE": "2",
        "SPOTHOP_GROUP_GENERATION": "3",
    }
    shape = world(env)
    assert shape.as_dict() == {
        "node_rank": 1,
        "nnodes": 2,
        "nproc_per_node": 2,
        "world_size": 4,
        "rank": None,  # the node runs two processes; which one is chosen by for_local_rank
        "local_rank": None,
        "generation": 3,
        "master_addr": "10.0.0.4",
        "master_port": 31007,
    }
    assert shape.under_spothop and shape.distributed
    assert shape.init_method == "tcp://10.0.0.4:31007"
    assert [shape.for_local_rank(i).rank for i in range(2)] == [2, 3]


def test_one_process_per_node_has_its_rank_at_once() -> None:
    shape = world({"SPOTHOP_NODE_RANK": "2", "SPOTHOP_NNODES": "3", "WORLD_SIZE": "3"})
    assert (shape.rank, shape.local_rank, shape.nproc_per_node) == (2, 0, 1)
    assert shape.for_local_rank(0) == shape


def test_a_process_started_by_torchrun_reads_rank_and_local_rank() -> None:
    env = {"NNODES": "2", "NODE_RANK": "1", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}
    shape = world(env)
    assert (shape.nproc_per_node, shape.rank, shape.local_rank) == (2, 3, 1)
    assert not shape.under_spothop
    only_rank = world({"NNODES": "2", "NODE_RANK": "1", "WORLD_SIZE": "4", "RANK": "2"})
    assert (only_rank.rank, only_rank.local_rank) == (2, 0)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"SPOTHOP_NNODES": "two"}, "SPOTHOP_NNODES='two' is not a whole number"),
        ({"SPOTHOP_NNODES": "0"}, "SPOTHOP_NNODES=0 must be ≥ 1"),
        ({"SPOTHOP_NNODES": "2", "SPOTHOP_NODE_RANK": "2"}, "SPOTHOP_NODE_RANK=2 is not below"),
        ({"SPOTHOP_NNODES": "2", "NNODES": "3"}, "SPOTHOP_NNODES=2 but NNODES=3"),
        ({"SPOTHOP_NNODES": "2", "WORLD_SIZE": "3"}, "WORLD_SIZE=3 but NNODES × NPROC_PER_NODE"),
        ({"NNODES": "2", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "0"}, "RANK=3 but node 0"),
        ({"NNODES": "2", "NODE_RANK": "0", "WORLD_SIZE": "2", "RANK": "1"}, "not one of node 0"),
        ({"NPROC_PER_NODE": "2", "LOCAL_RANK": "2"}, "local rank 2 is outside"),
    ],
)
def test_a_shape_that_does_not_hold_together_names_the_variable(
    env: dict[str, str], names: str
) -> None:
    with pytest.raises(WorldConfigError, match=names.replace("×", ".").replace("(", r"\(")) as err:
        world(env)
    assert isinstance(err.value, ConfigError)


def test_it_reads_the_process_environment_and_is_on_the_package_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPOTHOP_NNODES", "2")
    monkeypatch.setenv("SPOTHOP_NODE_RANK", "1")
    monkeypatch.setenv("SPOTHOP_GROUP_GENERATION", "1")
    assert spothop.world() == world() and world().generation == 1 and world().node_rank == 1


def test_importing_it_loads_only_the_standard_library() -> None:
    code = (
        "import sys; from spothop.worker import world; world()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'numpy', 'pydantic', 'sqlalchemy', 'yaml')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
