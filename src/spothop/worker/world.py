"""The worker's world: the shape of the group it runs in, read from the launcher's environment.

::

    from spothop.worker import world

    w = world()                       # World(node_rank=1, nnodes=2, nproc_per_node=1, ...)
    if w.nproc_per_node > 1:          # one process per GPU, torchrun-style
        torch.multiprocessing.spawn(train, args=(w,), nprocs=w.nproc_per_node)
    ...
    def train(local_rank, w):
        me = w.for_local_rank(local_rank)          # rank = node_rank * nproc_per_node + local_rank
        dist.init_process_group("gloo", init_method=me.init_method,
                                rank=me.rank, world_size=me.world_size)

Contracts:

- Standard library only; reading the environment is all it does.
- The environment is the launcher's (``docs/multinode.md``): ``SPOTHOP_NODE_RANK``,
  ``SPOTHOP_NNODES``, ``SPOTHOP_NPROC_PER_NODE``, ``SPOTHOP_GROUP_GENERATION``
  and torchrun's ``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``, ``NNODES``,
  ``NPROC_PER_NODE``, ``WORLD_SIZE``; ``RANK`` and ``LOCAL_RANK`` when a
  launcher such as torchrun set them for one process, or the node runs one process
  (then its rank is the node rank). spothop's own names win
  over torchrun's; a value missing from both has its default.
- Outside spothop (none of these set) it is a world of one: node 0 of 1, one
  process, rank 0, generation 0, ``MASTER_ADDR=127.0.0.1``.
- A value that is not a number, or a shape that does not hold together
  (``NODE_RANK`` ≥ ``NNODES``, ``WORLD_SIZE`` ≠ ``NNODES × NPROC_PER_NODE``,
  ``RANK`` ≥ ``WORLD_SIZE``, two names for one value that disagree) raises
  :class:`WorldConfigError` naming the variable, its value and what was expected.
- ``generation`` grows by one each time the group is relaunched or re-formed;
  a worker that finds a checkpoint written by another world size re-shards it
  (:mod:`spothop.checkpoint.reshard`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from spothop.errors import ConfigError

# -- the environment the launcher gives every node (docs/multinode.md) ----------------
NODE_RANK_ENV = "SPOTHOP_NODE_RANK"
NNODES_ENV = "SPOTHOP_NNODES"
NPROC_PER_NODE_ENV = "SPOTHOP_NPROC_PER_NODE"
GENERATION_ENV = "SPOTHOP_GROUP_GENERATION"
# torchrun's names (https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables")
TORCH_MASTER_ADDR_ENV = "MASTER_ADDR"
TORCH_MASTER_PORT_ENV = "MASTER_PORT"
TORCH_NODE_RANK_ENV = "NODE_RANK"
TORCH_NNODES_ENV = "NNODES"
TORCH_NPROC_PER_NODE_ENV = "NPROC_PER_NODE"
TORCH_WORLD_SIZE_ENV = "WORLD_SIZE"
TORCH_RANK_ENV = "RANK"
TORCH_LOCAL_RANK_ENV = "LOCAL_RANK"

DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29500  # torch.distributed's own default


class WorldConfigError(ConfigError):
    """The launcher's world environment does not hold together; the message names the variable."""


@dataclass(frozen=True)
class World:
    """One process's place in its group; ``rank``/``local_rank`` are None while the node runs several
    processes and none is chosen yet (:meth:`for_local_rank`)."""

    node_rank: int = 0
    nnodes: int = 1
    nproc_per_node: int = 1
    generation: int = 0
    master_addr: str = DEFAULT_MASTER_ADDR
    master_port: int = DEFAULT_MASTER_PORT
    rank: int | None = None
    local_rank: int | None = None
    under_spothop: bool = False

    @property
    def world_size(self) -> int:
        """Every process of the group: ``nnodes × nproc_per_node``."""
        return self.nnodes * self.nproc_per_node

    @property
    def distributed(self) -> bool:
        """Whether there is more than one process (a world of one needs no process group)."""
        return self.world_size > 1

    @property
    def init_method(self) -> str:
        """The rendezvous URL for ``torch.distributed.init_process_group(init_method=...)``."""
        return f"tcp://{self.master_addr}:{self.master_port}"

    def for_local_rank(self, local_rank: int) -> World:
        """This node's ``local_rank``-th process: its global rank is ``node_rank × nproc_per_node + local_rank``."""
        if not 0 <= local_rank < self.nproc_per_node:
            raise WorldConfigError(
                f"local rank {local_rank} is outside this node's {self.nproc_per_node} "
                f"process(es); pass 0..{self.nproc_per_node - 1}"
            )
        return replace(
            self, local_rank=local_rank, rank=self.node_rank * self.nproc_per_node + local_rank
        )

    def as_dict(self) -> dict[str, object]:
        """The shape as plain data (for a log line or a checkpoint's metadata)."""
        return {
            "node_rank": self.node_rank,
            "nnodes": self.nnodes,
            "nproc_per_node": self.nproc_per_node,
            "world_size": self.world_size,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "generation": self.generation,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
        }


def world(environ: Mapping[str, str] | None = None) -> World:
    """The shape of this worker's group from ``environ`` (default ``os.environ``); see the module contract."""
    env = os.environ if environ is None else environ
    reader = _Reader(env)
    nnodes = reader.number((NNODES_ENV, TORCH_NNODES_ENV), default=1, least=1)
    nproc = reader.optional((NPROC_PER_NODE_ENV, TORCH_NPROC_PER_NODE_ENV), least=1)
    world_size = reader.optional((TORCH_WORLD_SIZE_ENV,), least=1)
    if nproc is None:
        # torchrun alone sets WORLD_SIZE but not NPROC_PER_NODE: derive it when it divides.
        nproc = world_size // nnodes if world_size is not None and world_size % nnodes == 0 else 1
    if world_size is not None and world_size != nnodes * nproc:
        raise WorldConfigError(
            f"{TORCH_WORLD_SIZE_ENV}={world_size} but NNODES × NPROC_PER_NODE = "
            f"{nnodes} × {nproc} = {nnodes * nproc}; the launcher must set them consistently"
        )
    node_rank = reader.number((NODE_RANK_ENV, TORCH_NODE_RANK_ENV), default=0, least=0)
    if node_rank >= nnodes:
        raise WorldConfigError(
            f"{NODE_RANK_ENV}={node_rank} is not below NNODES={nnodes}; node ranks are 0..{nnodes - 1}"
        )
    shape = World(
        node_rank=node_rank,
        nnodes=nnodes,
        nproc_per_node=nproc,
        generation=reader.number((GENERATION_ENV,), default=0, least=0),
        master_addr=env.get(TORCH_MASTER_ADDR_ENV) or DEFAULT_MASTER_ADDR,
        master_port=reader.number((TORCH_MASTER_PORT_ENV,), default=DEFAULT_MASTER_PORT, least=1),
        under_spothop=reader.seen_spothop,
    )
    local_rank = reader.optional((TORCH_LOCAL_RANK_ENV,), least=0)
    rank = reader.optional((TORCH_RANK_ENV,), least=0)
    if local_rank is not None:
        placed = shape.for_local_rank(local_rank)
        if rank is not None and rank != placed.rank:
            raise WorldConfigError(
                f"{TORCH_RANK_ENV}={rank} but node {node_rank} × {nproc} + "
                f"{TORCH_LOCAL_RANK_ENV} {local_rank} = {placed.rank}; the launcher must agree"
            )
        return placed
    if rank is not None:
        if not node_rank * nproc <= rank < (node_rank + 1) * nproc:
            raise WorldConfigError(
                f"{TORCH_RANK_ENV}={rank} is not one of node {node_rank}'s ranks "
                f"({node_rank * nproc}..{(node_rank + 1) * nproc - 1} of world size {shape.world_size})"
            )
        return replace(shape, rank=rank, local_rank=rank - node_rank * nproc)
    if nproc == 1:  # one process per node: it is the node's only rank
        return shape.for_local_rank(0)
    return shape


class _Reader:
    """Reads integer variables, the first name of each tuple winning; two set names must agree."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.seen_spothop = False

    def number(self, names: tuple[str, ...], *, default: int, least: int) -> int:
        value = self.optional(names, least=least)
        return default if value is None else value

    def optional(self, names: tuple[str, ...], *, least: int) -> int | None:
        found: tuple[str, int] | None = None
        for name in names:
            raw = self._env.get(name)
            if raw is None or raw.strip() == "":
                continue
            try:
                value = int(raw.strip())
            except ValueError:
                raise WorldConfigError(
                    f"{name}={raw!r} is not a whole number; the launcher sets it to an integer ≥ {least}"
                ) from None
            if value < least:
                raise WorldConfigError(f"{name}={value} must be ≥ {least}")
            if name.startswith("SPOTHOP_"):
                self.seen_spothop = True
            if found is not None and found[1] != value:
                raise WorldConfigError(
                    f"{found[0]}={found[1]} but {name}={value}; they name the same thing "
                    "and must agree"
                )
            found = found or (name, value)
        return found[1] if found is not None else None
