"""The instance's own log (``events.jsonl``) holds the wire's event models, and reads back past a torn line."""

from __future__ import annotations

from pathlib import Path

from spothop.agent.events import EventLog, read_agent_events, read_events
from spothop.wire.events import AgentEvent, Interruption, SelfCheckEvent


def test_the_local_log_is_written_from_the_same_models(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    events: list[AgentEvent] = [
        SelfCheckEvent(instance_id="i-1", notice_blind=True, reasons=("no endpoint",)),
        Interruption(instance_id="i-1", steps_s={"stop": 0.01}),
    ]
    for event in events:
        log.write(event)
    with open(log.path, "a", encoding="utf-8") as handle:
        handle.write(
            '{"kind": "exited", "instance_id": "i-1"}\n{"torn'
        )  # malformed, then a torn last line
    assert read_agent_events(tmp_path) == events
    assert [e["kind"] for e in read_events(tmp_path)] == ["self_check", "interruption", "exited"]
