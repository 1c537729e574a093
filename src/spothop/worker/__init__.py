"""What a worker process uses to cooperate with the on-instance agent: the SDK, standard library only.

``stop_requested()``, ``on_stop()``, ``seconds_left()``, ``heartbeat()``,
``checkpoint_requested()`` and ``saved()`` talk to the agent and are harmless
no-ops when no agent runs (:mod:`spothop.worker.sdk`); the control folder they
use is :mod:`spothop.worker.channel`. ``world()`` is the shape of a multi-node
group (node rank, nodes, processes per node, generation) from the launcher's
environment, a world of one outside spothop (:mod:`spothop.worker.world`). Claiming shards under a lease lives with
batch jobs (:mod:`spothop.batch.shards`: ``iter_shards``, ``process_shards``),
so importing this package never loads the queue or SQLAlchemy
(``tests/agent/test_footprint.py`` checks it).
"""

from __future__ import annotations

from spothop.worker.sdk import (
    checkpoint_requested,
    heartbeat,
    on_stop,
    saved,
    seconds_left,
    stop_requested,
)
from spothop.worker.world import World, WorldConfigError, world

__all__ = [
    "World",
    "WorldConfigError",
    "checkpoint_requested",
    "heartbeat",
    "on_stop",
    "saved",
    "seconds_left",
    "stop_requested",
    "world",
]
