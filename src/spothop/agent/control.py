"""The agent's side of the agent ↔ worker control folder (the protocol: :mod:`spothop.worker.channel`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spothop.worker.channel import (
    CALLBACK_FILE,
    CHECKPOINT_FILE,
    HEARTBEAT_FILE,
    SAVED_FILE,
    STOP_FILE,
    read_json,
    write_json,
)


class ControlDir:
    """The agent's side of the control folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._checkpoint_seq = 0

    def reset(self) -> None:
        """Clear what a previous worker left (called before each worker start)."""
        for name in (STOP_FILE, SAVED_FILE, HEARTBEAT_FILE, CALLBACK_FILE):
            (self.path / name).unlink(missing_ok=True)

    def request_stop(self, deadline_unix_s: float, reason: str, notice: dict[str, Any]) -> None:
        write_json(
            self.path / STOP_FILE,
            {"deadline_unix_s": deadline_unix_s, "reason": reason, "notice": notice},
        )

    def request_checkpoint(self, reason: str) -> int:
        self._checkpoint_seq += 1
        write_json(self.path / CHECKPOINT_FILE, {"seq": self._checkpoint_seq, "reason": reason})
        return self._checkpoint_seq

    def saved(self) -> dict[str, Any] | None:
        """What the worker said it saved, once it called ``saved()``; None before."""
        return read_json(self.path / SAVED_FILE)

    def worker_heartbeat(self) -> float | None:
        payload = read_json(self.path / HEARTBEAT_FILE)
        value = payload.get("time_unix_s") if payload else None
        return float(value) if isinstance(value, int | float) else None

    def worker_step(self) -> int | None:
        """The step the worker last reported: its heartbeat's or its saved record's, the newer."""
        best: tuple[float, int] | None = None
        for name in (HEARTBEAT_FILE, SAVED_FILE):
            payload = read_json(self.path / name)
            step = payload.get("step") if payload else None
            at = payload.get("time_unix_s") if payload else None
            if isinstance(step, int) and not isinstance(step, bool):
                when = float(at) if isinstance(at, int | float) else 0.0
                if best is None or when > best[0]:
                    best = (when, step)
        return None if best is None else best[1]

    def callback_mode(self) -> bool:
        return (self.path / CALLBACK_FILE).exists()
