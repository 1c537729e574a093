"""The worker SDK: what a job's code calls to cooperate with the spothop agent.

::

    from spothop.worker import sdk

    for step in range(start, steps):
        train_step()
        if sdk.checkpoint_requested():      # an advance notice: save durably now
            save_checkpoint(durable=True)
        if sdk.stop_requested():            # a final notice: save fast, say so, leave
            save_checkpoint(emergency=True, within_s=sdk.seconds_left())
            sdk.saved(step=step)
            sys.exit(75)                    # preempted, resumable (EXIT_PREEMPTED)

Contracts:

- Standard library only; safe to import anywhere.
- Not under an agent (no ``SPOTHOP_AGENT_DIR``): every call is a harmless
  no-op — ``stop_requested()`` and ``checkpoint_requested()`` are False,
  ``seconds_left()`` is ``math.inf``, the rest do nothing.
- The channel is the agent's control folder (see :mod:`spothop.worker.channel`):
  the agent writes ``stop.json`` then, by default, sends SIGTERM to the
  worker's process group. A worker that registers :func:`on_stop` gets its
  callback instead of the signal (run once, in a background thread, within
  :data:`STOP_POLL_S` of the stop).
- ``checkpoint_requested()`` is edge-triggered: True once per request.
- ``saved()`` tells the agent the emergency checkpoint is done, so it
  moves on at once (upload, release leases, record) instead of waiting for
  the worker to exit or the budget to run out.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spothop.worker.channel import (
    AGENT_DIR_ENV,
    CALLBACK_FILE,
    CHECKPOINT_FILE,
    CHECKPOINT_URL_ENV,
    HEARTBEAT_FILE,
    SAVED_FILE,
    STOP_FILE,
    WORKER_ID_ENV,
    read_json,
    write_json,
)

STOP_POLL_S = 0.05  # how often the on_stop thread looks for stop.json

_lock = threading.Lock()
_callbacks: list[Callable[[], None]] = []
_watcher: threading.Thread | None = None
_checkpoint_seen = 0


def _agent_dir() -> Path | None:
    value = os.environ.get(AGENT_DIR_ENV)
    return Path(value) if value else None


def _read(name: str) -> dict[str, Any] | None:
    directory = _agent_dir()
    return read_json(directory / name) if directory is not None else None


def _write(name: str, payload: dict[str, Any]) -> None:
    directory = _agent_dir()
    if directory is not None:
        write_json(directory / name, payload)


def under_agent() -> bool:
    """Whether this process was started by a spothop agent."""
    return _agent_dir() is not None


def worker_id() -> str | None:
    """The id to claim shard leases under (``SPOTHOP_WORKER_ID``); None when not under an agent."""
    return os.environ.get(WORKER_ID_ENV)


def checkpoint_url() -> str | None:
    """Where the job's checkpoints go (``SPOTHOP_CHECKPOINT_URL``, set by the agent); None if unset."""
    return os.environ.get(CHECKPOINT_URL_ENV) or None


def stop_requested() -> bool:
    """True once the agent asked this worker to stop (a final notice)."""
    directory = _agent_dir()
    return directory is not None and (directory / STOP_FILE).exists()


def seconds_left() -> float:
    """Seconds until the instance is taken (the agent's deadline); ``math.inf`` while no stop is requested."""
    stop = _read(STOP_FILE)
    deadline = stop.get("deadline_unix_s") if stop else None
    if not isinstance(deadline, int | float):
        return math.inf
    return max(0.0, float(deadline) - time.time())


def checkpoint_requested() -> bool:
    """True once for each advance notice: checkpoint durably now (the instance may go soon)."""
    global _checkpoint_seen
    request = _read(CHECKPOINT_FILE)
    seq = request.get("seq") if request else None
    with _lock:
        if isinstance(seq, int) and seq > _checkpoint_seen:
            _checkpoint_seen = seq
            return True
    return False


def saved(**detail: Any) -> None:
    """Tell the agent the emergency checkpoint is saved; ``detail`` (step, path…) goes into its record."""
    _write(SAVED_FILE, {"time_unix_s": time.time(), **detail})


def heartbeat(step: int | None = None) -> None:
    """Tell the agent this worker is alive and making progress (it forwards it with its own heartbeat);
    ``step``, the training step reached, is what ``spothop status`` shows as a task's progress."""
    payload: dict[str, Any] = {"time_unix_s": time.time(), "pid": os.getpid()}
    if step is not None:
        payload["step"] = int(step)
    _write(HEARTBEAT_FILE, payload)


def on_stop(callback: Callable[[], None]) -> None:
    """Run ``callback`` (once, in a background thread) when the agent asks to stop, instead of SIGTERM."""
    global _watcher
    directory = _agent_dir()
    with _lock:
        _callbacks.append(callback)
        if directory is None or _watcher is not None:
            return
        _watcher = threading.Thread(target=_watch_stop, name="spothop-on-stop", daemon=True)
        _watcher.start()
    (directory / CALLBACK_FILE).write_text(str(os.getpid()), encoding="utf-8")


def _watch_stop() -> None:
    while not stop_requested():
        time.sleep(STOP_POLL_S)
    with _lock:
        callbacks = list(_callbacks)
    for callback in callbacks:
        callback()
