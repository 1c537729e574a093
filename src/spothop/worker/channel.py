"""The agent ↔ worker channel, shared by both sides: a control folder, ``$SPOTHOP_AGENT_DIR``.

The agent (:mod:`spothop.agent.control`) and the worker SDK
(:mod:`spothop.worker.sdk`) both read and write it through this module, so
the names exist once. Files, each written atomically
(:func:`spothop.paths.atomic_write_text`), so a reader sees all of one or none:

====================  ======  ====================================================
file                  writer  meaning
====================  ======  ====================================================
``stop.json``         agent   stop now; ``{"deadline_unix_s", "reason", "notice"}``
``checkpoint.json``   agent   checkpoint durably now; ``{"seq", "reason"}``, seq grows
``saved.json``        worker  the emergency checkpoint is saved (SDK ``saved()``)
``heartbeat.json``    worker  the worker is alive (SDK ``heartbeat()``)
``stop-callback``     worker  the worker registered ``on_stop``: deliver stop by
                              ``stop.json`` alone, no SIGTERM
====================  ======  ====================================================

Why files: no server thread or port in the agent, nothing to bind, works in
any container with a shared folder, survives a worker restart, and the
stdlib-only SDK reads it with one ``stat``. The cost — a worker that polls
the folder sees a stop within its poll period — is paid only in callback
mode; by default stop also arrives as SIGTERM to the worker's process group.

Standard library only (and :mod:`spothop.paths`, which is too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spothop.paths import atomic_write_text

# -- the environment the agent gives the worker --------------------------------------
AGENT_DIR_ENV = "SPOTHOP_AGENT_DIR"  # the control folder
WORKER_ID_ENV = "SPOTHOP_WORKER_ID"  # the id the worker claims shard leases under
INSTANCE_ID_ENV = "SPOTHOP_INSTANCE_ID"
JOB_ID_ENV = "SPOTHOP_JOB_ID"
QUEUE_URL_ENV = "SPOTHOP_QUEUE_URL"
CHECKPOINT_URL_ENV = "SPOTHOP_CHECKPOINT_URL"
OUTPUT_URL_ENV = "SPOTHOP_OUTPUT_URL"  # batch jobs: where shard outputs go (batch.output)

# -- the control folder's files ---------------------------------------------------
STOP_FILE = "stop.json"
CHECKPOINT_FILE = "checkpoint.json"
SAVED_FILE = "saved.json"
HEARTBEAT_FILE = "heartbeat.json"
CALLBACK_FILE = "stop-callback"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically; no fsync: a reader on this machine, not a crash, is the concern."""
    atomic_write_text(path, json.dumps(payload, default=str), durable=False)


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's JSON object, or None if it is absent or not a JSON object."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None
