"""The embedded control plane's store process: ``python -m spothop.controlplane.host``.

The agent (:class:`~spothop.controlplane.embedded.EmbeddedControlPlane`)
starts it once; it runs a :class:`~spothop.controlplane.store.StoreControlPlane`,
so SQLAlchemy, the store and the queue live here and never in the agent.

Wire protocol, one JSON object a line (UTF-8):

- at start the process opens the store (migrations included), imports the
  preemption history and the queue, then writes ``{"ready": true}``; a store
  that cannot be opened is logged and each call reports it (the store may
  come up later);
- agent → host on stdin: ``{"id": N, "method": M, "arg": A}``, with ``M`` one
  of :data:`METHODS` and ``A`` its one argument as JSON (a registration, a
  heartbeat or an event as its ``to_dict()``, a worker or request id, or null);
- host → agent on stdout: ``{"id": N, "result": R}`` or ``{"id": N, "error":
  {"type": T, "message": S, "control_plane": B}}`` (``B``: the error is a
  :class:`ControlPlaneError`, i.e. the store was unreachable, not a refusal; a
  :class:`LogOffsetGap` adds ``"end_bytes"``, the stored end).

Calls are served one at a time, in order. The process exits 0 when its stdin
closes (the agent exited, or was SIGKILLed), and ignores SIGTERM and SIGINT:
a final notice delivered as a SIGTERM to every process must not stop the
store process before the agent has released the leases and recorded the
interruption. The agent starts it with both signals blocked, so that one
sent while the interpreter is still starting (before it can ignore them)
waits and is then discarded. Its logs go to stderr (the agent's); stdout carries only the
protocol, so a library printing cannot corrupt it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import IO, Any

from spothop.controlplane.embedded import STORE_PROCESS_SIGNALS
from spothop.controlplane.queue_leases import queue_leases
from spothop.controlplane.store import StoreControlPlane
from spothop.wire.contract import Heartbeat, Registration
from spothop.wire.errors import ControlPlaneError, LogOffsetGap
from spothop.wire.events import event_from_dict
from spothop.wire.group import Rendezvous
from spothop.wire.logs import LogChunk

log = logging.getLogger("spothop.controlplane.host")

Method = Callable[[StoreControlPlane, Any], Any]

METHODS: dict[str, Method] = {
    "register": lambda plane, arg: plane.register(Registration.from_dict(arg)),
    "heartbeat": lambda plane, arg: plane.heartbeat(Heartbeat.from_dict(arg)),
    "record": lambda plane, arg: plane.record(event_from_dict(arg)),
    "release_leases": lambda plane, arg: plane.release_leases(str(arg)),
    "requests": lambda plane, arg: [r.to_dict() for r in plane.requests()],
    "acknowledge": lambda plane, arg: plane.acknowledge(str(arg)),
    "ship_log": lambda plane, arg: plane.ship_log(LogChunk.from_dict(arg)),
    "rendezvous": lambda plane, arg: _optional(plane.rendezvous()),
    "secrets": lambda plane, arg: plane.secrets(),
}


def _optional(rendezvous: Rendezvous | None) -> dict[str, Any] | None:
    return None if rendezvous is None else rendezvous.to_dict()


def answer(plane: StoreControlPlane, line: bytes) -> dict[str, Any]:
    """The reply to one request line; never raises (a bad line is answered with an error)."""
    try:
        request = json.loads(line)
        call_id, method = request["id"], METHODS[request["method"]]
    except (ValueError, KeyError, TypeError) as exc:
        return {
            "id": None,
            "error": {
                "type": "ValueError",
                "message": f"not a request line: {exc}",
                "control_plane": False,
            },
        }
    try:
        return {"id": call_id, "result": method(plane, request.get("arg"))}
    except Exception as exc:  # every failure is the caller's to handle: it goes back typed
        return {
            "id": call_id,
            "error": {
                "type": type(exc).__name__,
                "message": str(exc),
                "control_plane": isinstance(exc, ControlPlaneError),
                **({"end_bytes": exc.end_bytes} if isinstance(exc, LogOffsetGap) else {}),
            },
        }


def serve(plane: StoreControlPlane, requests: IO[bytes], replies: IO[bytes]) -> None:
    """Warm ``plane``, say ready, then answer each line of ``requests`` until it closes."""
    plane.warm()
    _write(replies, {"ready": True})
    for line in requests:
        if line.strip():
            _write(replies, answer(plane, line))


def _write(replies: IO[bytes], message: dict[str, Any]) -> None:
    replies.write(json.dumps(message, default=str).encode() + b"\n")
    replies.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spothop.controlplane.host",
        description="the embedded control plane's store process (started by the agent)",
    )
    parser.add_argument(
        "--url", default=None, help="the store's database URL (default: spothop's default)"
    )
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--queue-url", default=None)
    parser.add_argument("--job-id", default=None)
    args = parser.parse_args(argv)
    # The agent's exit (stdin closing) is what stops us. The agent starts us with both signals
    # blocked, so one sent while this interpreter was still starting waits, pending, and is
    # discarded here once ignored: a shutdown's SIGTERM at any moment cannot stop us.
    for signum in STORE_PROCESS_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STORE_PROCESS_SIGNALS)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="spothop control-plane host: %(levelname)s %(message)s",
    )
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(
        sys.stderr.fileno(), sys.stdout.fileno()
    )  # anything printed goes to the log, not the protocol
    plane = StoreControlPlane(
        args.url, args.instance_id, queue=queue_leases(args.queue_url, args.job_id)
    )
    with contextlib.suppress(BrokenPipeError):  # the agent is gone: nothing left to answer
        serve(plane, sys.stdin.buffer, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
