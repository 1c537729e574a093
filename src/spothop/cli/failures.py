"""Errors from below spothop that escape a command: an unreachable service, a path the OS refuses.

spothop's own errors carry their exit code. A few foreign ones reach the
command line because a service spothop talks to (PostgreSQL through
SQLAlchemy, Redis) or the file system raised them after spothop's own checks;
they mean "unavailable" or "that path" rather than "spothop has a bug", so
:func:`describe_outside_error` turns them into one line and a code from
:mod:`spothop.errors`. Anything else is a bug and keeps its traceback.

The database and Redis modules are looked up in ``sys.modules`` rather than
imported: if a command never imported them, none of their errors can be here,
and ``spothop --help`` stays fast.
"""

from __future__ import annotations

import errno
import sys
from dataclasses import dataclass

from spothop.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_UNAVAILABLE

_DETAIL_CHARS = 300  # a driver's message can carry a whole SQL statement; its start says why


@dataclass(frozen=True)
class OutsideError:
    message: str
    exit_code: int


def describe_outside_error(exc: BaseException) -> OutsideError | None:
    """One line and an exit code for a known foreign error, or ``None`` for a bug."""
    database = _database_error(exc)
    if database is not None:
        return database
    redis_exc = sys.modules.get("redis.exceptions")
    if redis_exc is not None and isinstance(
        exc, redis_exc.ConnectionError | redis_exc.TimeoutError
    ):
        return OutsideError(
            f"Redis did not answer: {_first_line(exc)}; check the redis:// URL and that the server is running",
            EXIT_UNAVAILABLE,
        )
    if isinstance(exc, OSError):
        return _os_error(exc)
    return None


def _database_error(exc: BaseException) -> OutsideError | None:
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is None or not isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return None
    cause = getattr(exc, "orig", None) or exc
    return OutsideError(
        f"the database did not answer or refused the connection: {_first_line(cause)}; "
        "check the database URL (SPOTHOP_DATABASE_URL, --url) and that the server is running",
        EXIT_UNAVAILABLE,
    )


def _os_error(exc: OSError) -> OutsideError:
    where = f" {exc.filename}" if exc.filename is not None else ""
    reason = exc.strerror or _first_line(exc)
    if isinstance(exc, FileNotFoundError):
        return OutsideError(f"{reason}:{where}", EXIT_NOT_FOUND)
    if exc.errno == errno.ENOSPC:
        return OutsideError(
            f"{reason}:{where}; free space on that disk, then run the command again",
            EXIT_UNAVAILABLE,
        )
    if exc.errno == errno.EROFS:
        return OutsideError(
            f"{reason}:{where}; remount that disk read-write (or point SPOTHOP_HOME at a "
            "writable one), then run the command again",
            EXIT_UNAVAILABLE,
        )
    if isinstance(exc, IsADirectoryError | NotADirectoryError | FileExistsError | PermissionError):
        return OutsideError(
            f"{reason}:{where}; give a path of the right kind (a file, or a folder) that you may use",
            EXIT_BAD_INPUT,
        )
    if isinstance(exc, ConnectionError | TimeoutError):
        return OutsideError(f"a service did not answer: {reason}", EXIT_UNAVAILABLE)
    return OutsideError(f"{reason}:{where}", EXIT_FAILED)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:_DETAIL_CHARS]
