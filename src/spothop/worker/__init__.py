"""What a worker process uses to cooperate with the on-instance agent: the SDK, standard library only.

``stop_requested()``, ``on_stop()``, ``seconds_left()``, ``heartbeat()``,
``checkpoint_requested()`` and ``saved()`` talk to the agent and are harmless
no-ops when no agent runs (:mod:`spothop.worker.sdk`); the control folder they
use is :mod:`spothop.worker.channel`. Claiming shards under a lease lives with
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

__all__ = [
    "checkpoint_requested",
    "heartbeat",
    "on_stop",
    "saved",
    "seconds_left",
    "stop_requested",
]
