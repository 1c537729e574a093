"""A grouped task's rendezvous: where its nodes meet, as the control plane hands it to each node's agent.

A multi-node task's nodes are launched before any of them has an address
(docs/multinode.md). Each node's agent registers its private address (read from
its cloud's metadata service); once every node of the group's generation has, and none of
them is lost or going (docs/multinode.md),
:meth:`~spothop.wire.contract.ControlPlane.rendezvous` answers each node with a
:class:`Rendezvous`: node 0's address and the generation's port, this node's
rank, the group's shape, and every node's address in rank order. The agent
then starts its worker with :meth:`Rendezvous.env` in its environment.

The launch already gives a node what is known before boot (:func:`shape_env`:
its rank, the node count, processes per node, generation and port); its
missing ``MASTER_ADDR`` is what tells the agent to wait for the rendezvous
(:func:`deferred`).

Standard library only: the agent imports it while it watches.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from spothop.wire.fields import INT32_MAX, Count, Limits

MASTER_ADDR_ENV = "MASTER_ADDR"
NNODES_ENV = "SPOTHOP_NNODES"
NPROC_PER_NODE_ENV = "SPOTHOP_NPROC_PER_NODE"
GENERATION_ENV = "SPOTHOP_GROUP_GENERATION"
# SkyPilot's own variables for a task's setup and run (its docs, "SkyPilot environment
# variables"), with spothop's meaning (spothop.jobs.launcher.skypilot_env).
SKYPILOT_NODE_RANK = "SKYPILOT_NODE_RANK"
SKYPILOT_NODE_IPS = "SKYPILOT_NODE_IPS"
SKYPILOT_NUM_NODES = "SKYPILOT_NUM_NODES"
SKYPILOT_SETUP_NODE_RANK = "SKYPILOT_SETUP_NODE_RANK"
SKYPILOT_SETUP_NODE_IPS = "SKYPILOT_SETUP_NODE_IPS"

# MASTER_PORT is drawn from these, per (job, generation): below Linux's ephemeral range
# (32768-60999, /proc/sys/net/ipv4/ip_local_port_range) so no outgoing socket holds it, and above
# torch's default 29500 neighbourhood's start. A new generation never reuses its predecessor's
# port, which a dying process of the old group may still hold.
GROUP_PORT_LOW = 12_000
GROUP_PORT_COUNT = 20_000
# An address as a metadata service prints it: IPv4 dotted (15), IPv6 (45 at most) or a host name.
Address = Annotated[str, Limits(max_len=64)]
MAX_NODES = 1024  # a group's nodes at most (every node's address crosses the wire in each answer)
Port = Annotated[int, Limits(ge=1, le=65535)]
Nodes = Annotated[int, Limits(ge=1, le=MAX_NODES)]
Procs = Annotated[int, Limits(ge=1, le=INT32_MAX)]


@dataclass(frozen=True)
class Rendezvous:
    """Where one node of a group's generation meets the others (module docstring).

    ``node_addrs`` holds every node's private address, node 0's first: ``master_addr``
    is ``node_addrs[0]``.
    """

    master_addr: Address
    master_port: Port
    node_rank: Count
    nnodes: Nodes
    nproc_per_node: Procs
    generation: Count
    node_addrs: Annotated[tuple[Address, ...], Limits(max_len=MAX_NODES)]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rendezvous:
        """From its JSON form; ValueError (or KeyError, TypeError) for one that is not whole."""
        rendezvous = cls(
            master_addr=str(data["master_addr"]),
            master_port=int(data["master_port"]),
            node_rank=int(data["node_rank"]),
            nnodes=int(data["nnodes"]),
            nproc_per_node=int(data["nproc_per_node"]),
            generation=int(data["generation"]),
            node_addrs=tuple(str(a) for a in data["node_addrs"]),
        )
        rendezvous.check()
        return rendezvous

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "node_addrs": list(self.node_addrs)}

    def check(self) -> None:
        """ValueError naming what does not hold: an address for each node, node 0's the master's."""
        if len(self.node_addrs) != self.nnodes or not all(self.node_addrs):
            raise ValueError(
                f"a rendezvous of {self.nnodes} nodes needs one address each, got {self.node_addrs!r}"
            )
        if self.master_addr != self.node_addrs[0] or not 0 <= self.node_rank < self.nnodes:
            raise ValueError(
                f"rendezvous: master {self.master_addr!r} is not node 0's ({self.node_addrs[0]!r}),"
                f" or rank {self.node_rank} is not one of {self.nnodes}"
            )

    def env(self) -> dict[str, str]:
        """The worker's variables: torchrun's, spothop's and SkyPilot's (one address a line)."""
        ips = "\n".join(self.node_addrs)
        return {
            **shape_env(
                node=self.node_rank,
                nnodes=self.nnodes,
                nproc_per_node=self.nproc_per_node,
                generation=self.generation,
                master_port=self.master_port,
            ),
            MASTER_ADDR_ENV: self.master_addr,
            SKYPILOT_NODE_IPS: ips,
            SKYPILOT_SETUP_NODE_IPS: ips,
        }


def shape_env(
    *, node: int, nnodes: int, nproc_per_node: int, generation: int, master_port: int
) -> dict[str, str]:
    """What a group's node is told at launch: everything of its rendezvous but the addresses."""
    return {
        "MASTER_PORT": str(master_port),
        "NODE_RANK": str(node),
        "NNODES": str(nnodes),
        "NPROC_PER_NODE": str(nproc_per_node),
        "WORLD_SIZE": str(nnodes * nproc_per_node),
        NNODES_ENV: str(nnodes),
        NPROC_PER_NODE_ENV: str(nproc_per_node),
        GENERATION_ENV: str(generation),
        SKYPILOT_NODE_RANK: str(node),
        SKYPILOT_SETUP_NODE_RANK: str(node),
        SKYPILOT_NUM_NODES: str(nnodes),
    }


def deferred(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is a group node's whose rendezvous is still to come: it names the group
    (``SPOTHOP_NNODES``) but not node 0's address (``MASTER_ADDR``)."""
    return bool(env.get(NNODES_ENV)) and not env.get(MASTER_ADDR_ENV)


def group_port(job_id: str, generation: int) -> int:
    """The rendezvous port of ``job_id``'s generation ``generation``: the same on every node and
    on the control plane (each computes it from the job and generation alone), another for the
    next generation."""
    return GROUP_PORT_LOW + zlib.crc32(f"{job_id}:{generation}".encode()) % GROUP_PORT_COUNT
