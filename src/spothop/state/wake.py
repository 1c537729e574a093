"""Waking the controller: one Unix datagram socket per ``SPOTHOP_HOME``.

The controller's loop sleeps on a :class:`Waker` between passes; whatever
records something the controller must act on (the embedded control plane's
store process after it stores an agent event, ``spothop launch`` after it
creates a job, ``spothop cancel``) calls :func:`poke`, and the loop runs its
next pass at once instead of at its slow periodic pass. A poke carries no
data the controller relies on: it only says "look now", so a lost poke costs
one periodic pass, never an event (the events themselves are in the store).

Rules:

- :func:`poke` never raises and never blocks: no controller listening, a
  missing socket, a full buffer, an odd home — it returns ``False``.
- The socket's address is :func:`wake_address` of the home: a path
  ``<home>/controller/wake.sock`` when it fits a Unix socket address
  (107 bytes), else a Linux abstract address derived from the home's path,
  written ``@name`` (as ``ss`` shows them; an environment variable cannot
  carry the NUL the kernel wants, :func:`_sockaddr` adds it).
  ``$SPOTHOP_WAKE_SOCKET`` overrides it (the controller hands its own to the
  instances it launches, so their store process pokes the right one).
- Standard library only: the agent's store process imports this.
"""

from __future__ import annotations

import hashlib
import os
import select
import socket
import sys
from pathlib import Path

WAKE_SOCKET_ENV = "SPOTHOP_WAKE_SOCKET"
_MAX_PATH_BYTES = 100  # sun_path is 108 bytes on Linux, 104 on macOS: stay under both


def _home() -> Path:
    configured = os.environ.get("SPOTHOP_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".spothop"


def wake_address(home: Path | None = None) -> str:
    """The address the controller of ``home`` (default ``$SPOTHOP_HOME``) listens on.

    A leading ``@`` marks a Linux abstract address (no file); anything else is a path.
    """
    if home is None:
        override = os.environ.get(WAKE_SOCKET_ENV)
        if override:
            return override
        home = _home()
    path = home / "controller" / "wake.sock"
    if len(os.fsencode(str(path))) <= _MAX_PATH_BYTES or not sys.platform.startswith("linux"):
        return str(path)
    digest = hashlib.sha256(os.fsencode(str(home.resolve()))).hexdigest()[:24]
    return f"@spothop-wake-{digest}"


def _sockaddr(address: str) -> str:
    return "\0" + address[1:] if address.startswith("@") else address


def poke(address: str | None = None) -> bool:
    """Tell the controller listening on ``address`` (default :func:`wake_address`) to look now.

    Best effort: ``True`` if the datagram was sent, ``False`` otherwise; never raises.
    """
    try:
        target = address or wake_address()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(b"wake", _sockaddr(target))
        return True
    except Exception:
        return False


class Waker:
    """The controller's side: bind the home's address; :meth:`wait` until poked or a timeout.

    Only one process can bind an address; the controller's daemon lock makes
    sure that is the one controller of the home. A stale socket file left by a
    killed controller is removed before binding (the lock says no one else owns it).
    """

    def __init__(self, address: str | None = None) -> None:
        self.address = address or wake_address()
        if not self.address.startswith("@"):
            path = Path(self.address)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(_sockaddr(self.address))
        self._sock.setblocking(False)

    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s``; ``True`` if poked (every queued poke is drained)."""
        ready, _, _ = select.select([self._sock], [], [], max(0.0, timeout_s))
        if not ready:
            return False
        self.drain()
        return True

    def drain(self) -> int:
        """Discard every queued poke; how many there were."""
        count = 0
        while True:
            try:
                self._sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return count
            count += 1

    def close(self) -> None:
        self._sock.close()
        if not self.address.startswith("@"):
            Path(self.address).unlink(missing_ok=True)

    def __enter__(self) -> Waker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
