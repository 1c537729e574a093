"""A small control-plane server for the tests: the HTTP agent API of docs/agent.md, in a thread.

It records every request it receives (method, path, headers, body) and
serves the contract by delegating to the store control plane on a real
store, so what an agent sends over HTTP ends in the same tables as the
embedded implementation writes. ``token`` set: any other bearer token is a
401. ``fail_next`` answers that many requests with 503 *after* handling
them (a reply lost on the way back), so the agent resends what was stored;
``down`` answers every request with 503 *without* handling it (an outage).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

from spothop.controlplane import Heartbeat, QueueLeases, Registration, StoreControlPlane
from spothop.wire.errors import LogOffsetGap
from spothop.wire.events import event_from_dict
from spothop.wire.logs import LogChunk
from tests.agent.stubs import Answer, StubHandler, StubServer

AGENT_PATH = re.compile(r"^/v1/agents/(?P<instance>[^/]+)/(?P<rest>.+)$")


def _rendezvous(plane: StoreControlPlane) -> dict[str, Any]:
    answer = plane.rendezvous()
    return {"rendezvous": None if answer is None else answer.to_dict()}


# The agent API's reads: GET /v1/agents/{instance}/NAME → the answer's body.
_READS: dict[str, Callable[[StoreControlPlane], dict[str, Any]]] = {
    "rendezvous": _rendezvous,
    "secrets": lambda plane: {"secrets": plane.secrets()},
    "requests": lambda plane: {"requests": [r.to_dict() for r in plane.requests()]},
}


class ControlServer(StubServer):
    """Serves the agent API over a real store; :attr:`received` is every request, JSON bodies decoded."""

    def __init__(
        self,
        store_url: str,
        *,
        token: str | None = None,
        queue: QueueLeases | None = None,
        port: int = 0,
    ) -> None:
        super().__init__(self._route, port=port)
        self.store_url, self.token, self.queue = store_url, token, queue
        self.fail_next = 0
        self.down = False
        self.lock = threading.Lock()
        self._planes: dict[str, StoreControlPlane] = {}

    def __enter__(self) -> ControlServer:
        super().__enter__()
        return self

    @property
    def received(self) -> list[tuple[str, str, dict[str, str], Any]]:
        return [
            (method, path, headers, json.loads(body) if body else None)
            for method, path, headers, body in self.requests
        ]

    def _route(self, handler: StubHandler) -> Answer:
        if (
            self.token is not None
            and handler.headers.get("Authorization") != f"Bearer {self.token}"
        ):
            return 401, json.dumps({"error": "bad token"})
        if self.down:
            return 503, json.dumps({"error": "down"})
        status, answer = self.serve(
            handler.command, handler.path, json.loads(handler.body) if handler.body else None
        )
        with self.lock:
            if self.fail_next > 0:
                self.fail_next -= 1
                status, answer = 503, {"error": "lost reply"}
        return status, json.dumps(answer)

    def plane(self, instance_id: str) -> StoreControlPlane:
        with self.lock:
            return self._planes.setdefault(
                instance_id, StoreControlPlane(self.store_url, instance_id, queue=self.queue)
            )

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.received]

    def serve(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if (method, path) == ("POST", "/v1/agents/register"):
            self.plane(body["instance_id"]).register(Registration.from_dict(body))
            return 200, {}
        match = AGENT_PATH.match(path)
        if match is None:
            return 404, {"error": path}
        plane, rest = self.plane(match["instance"]), match["rest"]
        if (method, rest) == ("POST", "heartbeat"):
            plane.heartbeat(Heartbeat.from_dict(body))
            return 200, {}
        if (method, rest) == ("POST", "events"):
            for event in body["events"]:
                plane.record(event_from_dict(event))
            return 200, {"stored": len(body["events"])}
        if (method, rest) == ("POST", "leases/release"):
            return 200, {"released": plane.release_leases(body["worker_id"])}
        if method == "GET" and rest in _READS:
            return 200, _READS[rest](plane)
        if (method, rest) == ("POST", "logs"):
            try:
                return 200, {"end_bytes": plane.store_log(LogChunk.from_dict(body))}
            except LogOffsetGap as gap:
                error = {"type": "LogOffsetGap", "message": str(gap), "end_bytes": gap.end_bytes}
                return 409, {
                    "error": {
                        **error,
                        "attempt_id": gap.attempt_id,
                        "offset_bytes": gap.offset_bytes,
                    }
                }
        ack = re.fullmatch(r"requests/([^/]+)/ack", rest)
        if method == "POST" and ack:
            plane.acknowledge(ack[1])
            return 200, {}
        return 404, {"error": path}
