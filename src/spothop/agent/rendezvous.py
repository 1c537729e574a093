"""A grouped task's node waits for its group's rendezvous before its worker starts.

The contract (docs/agent.md, "A group's rendezvous"):

1. The launch gives a group's node its shape (rank, node count, processes per
   node, generation, port) but not node 0's address: no node has one before it
   boots. Its missing ``MASTER_ADDR`` is what says so
   (:func:`spothop.wire.group.deferred`).
2. The agent reads its private address from its cloud's metadata service
   (the self-check's identity; where the endpoint gives none, the address of
   the interface this host routes out of, logged: :func:`route_address`) and
   registers it.
3. It asks the control plane for the rendezvous
   (:meth:`~spothop.wire.contract.ControlPlane.rendezvous`) every
   :data:`POLL_S`, the interval doubled while none comes, up to
   :data:`POLL_MAX_S`, logging each time what it waits for. A failed call is
   logged and asked again at the next interval.
4. The rendezvous sets ``MASTER_ADDR``, ``SKYPILOT_NODE_IPS`` and the rest of
   the group's variables in the worker's environment
   (:meth:`~spothop.wire.group.Rendezvous.env`); then the worker starts.
5. No rendezvous by the deadline (``--rendezvous-timeout``): the agent gives
   up (exit 1, :data:`~spothop.wire.contract.EXIT_WORKER_FAILED`); the
   controller relaunches the generation. A stop or a final notice while it
   waits ends the wait: nothing ran, nothing is saved.

Standard library only; the clock is injectable (tests).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from collections.abc import Callable

from spothop.agent.model import SelfCheck
from spothop.wire.contract import ControlPlane
from spothop.wire.group import Rendezvous

log = logging.getLogger(__name__)

POLL_S = 0.5  # the first asks: a group whose nodes all booted meets within a second or so
POLL_MAX_S = 10.0  # a node waiting for a replacement's boot (minutes) asks every 10 s at most
ROUTE_PROBE = (
    "192.0.2.1",
    9,
)  # TEST-NET-1 (RFC 5737): a UDP connect picks the route, sends nothing


class RendezvousWait:
    """Asks ``plane`` for the rendezvous when one ask is due (:meth:`step`), until ``timeout_s``.

    ``what`` names the node in the log lines (its rank, generation and the group's size).
    """

    def __init__(
        self,
        plane: ControlPlane,
        *,
        timeout_s: float,
        what: str,
        clock: Callable[[], float] = time.monotonic,
        poll_s: float = POLL_S,
        poll_max_s: float = POLL_MAX_S,
    ) -> None:
        self.plane = plane
        self.what = what
        self.clock = clock
        self.poll_s = poll_s
        self.poll_max_s = poll_max_s
        self.started = clock()
        self.deadline = self.started + timeout_s
        self.asks = 0
        self._interval_s = poll_s
        self._next = self.started

    @property
    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def step(self) -> Rendezvous | None:
        """Ask once if an ask is due; the rendezvous, or None (not yet, not due, or the call failed)."""
        now = self.clock()
        if now < self._next:
            return None
        self.asks += 1
        try:
            answer = self.plane.rendezvous()
        except Exception as exc:  # an outage: logged, asked again at the next interval
            log.warning("asking for the group's rendezvous failed: %s", exc)
            answer = None
        if answer is not None:
            log.info(
                "rendezvous for %s after %.1f s: master %s:%d, nodes %s",
                self.what,
                now - self.started,
                answer.master_addr,
                answer.master_port,
                ", ".join(answer.node_addrs),
            )
            return answer
        if self.asks == 1 or self._interval_s < self.poll_max_s:
            log.info(
                "%s waits for its group's rendezvous: every node of the generation must register"
                " its address (%.0f s waited, %.0f s left; next ask in %.1f s)",
                self.what,
                now - self.started,
                max(0.0, self.deadline - now),
                self._interval_s,
            )
        self._next = now + self._interval_s
        self._interval_s = min(self._interval_s * 2, self.poll_max_s)
        return None

    def wait_s(self) -> float:
        """Seconds until the next ask is due (0: now)."""
        return max(0.0, self._next - self.clock())


def route_address() -> str:
    """What a group node registers where its metadata service gives no private address: the
    address of the interface this host routes out of, else its host name's address ("" when
    neither is known)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(ROUTE_PROBE)
            return str(probe.getsockname()[0])
    except OSError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return ""


def with_address(check: SelfCheck, protocol: str) -> SelfCheck:
    """``check`` with a private address for a group's node to register: its metadata endpoint's,
    else the host's own (:func:`route_address`, logged)."""
    if check.identity.private_address:
        return check
    address = route_address()
    log.warning(
        "the metadata endpoint (%s) gives no private address; registering %r, this host's own",
        protocol,
        address,
    )
    identity = dataclasses.replace(check.identity, private_address=address)
    return dataclasses.replace(check, identity=identity)
