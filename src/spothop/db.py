"""Database engines: SQLite by default, PostgreSQL at scale, one way to open either.

Every part of spothop that keeps rows (the job store, the SQL shard queue,
price history, the local cloud's records) opens its engine here, so that the
SQLite settings that make concurrent access safe are set in one place.

spothop's own tables (all but the local cloud's records) are defined in
:mod:`spothop.state`'s one registry and created by its migrations
(:func:`spothop.state.ensure_schema`).

The default database is ``$SPOTHOP_HOME/spothop.db``; ``SPOTHOP_DATABASE_URL``
or an explicit URL selects another (``postgresql+psycopg://user@host/db``).
A plain ``postgresql://`` URL is read as psycopg 3.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from sqlalchemy import Engine, create_engine, event

from spothop.errors import ConfigError, NotFoundError, StoreUnwritable
from spothop.paths import ensure_home, spothop_home, warn_if_shared

DATABASE_URL_ENV = "SPOTHOP_DATABASE_URL"

# How long a SQLite writer waits for another to finish before failing. Long
# enough for a burst of queue claims from many workers on one machine.
SQLITE_BUSY_TIMEOUT_MS = 30_000


def default_database_url() -> str:
    configured = os.environ.get(DATABASE_URL_ENV)
    if configured:
        return configured
    return f"sqlite:///{ensure_home() / 'spothop.db'}"


def store_to_read(url: str | None) -> str:
    """The store a command that only reads opens: ``url``, else the default.

    A SQLite file that does not exist is a :class:`NotFoundError` naming it: a read never creates
    a store (``jobs --store sqlite:///typo.db`` made an empty store at the typo and said "no jobs
    yet"). The home is not created either.
    """
    chosen = url or os.environ.get(DATABASE_URL_ENV)
    if not chosen:
        home = spothop_home()
        if home.is_dir():
            warn_if_shared(home)
        chosen = f"sqlite:///{home / 'spothop.db'}"
    path = sqlite_path(normalise_url(chosen))
    if path is not None and not os.path.exists(path):
        raise NotFoundError(
            f"no store at {path}: check --store or SPOTHOP_DATABASE_URL (a typo?); "
            "`spothop launch JOB.yaml` creates the store with its first job"
        )
    return chosen


def normalise_url(url: str) -> str:
    """``postgresql://`` → ``postgresql+psycopg://`` (psycopg 3, not the psycopg2 default)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(
    url: str | None = None, *, idle_transaction_timeout_s: float | None = None, **options: Any
) -> Engine:
    """A new engine for ``url`` (default: :func:`default_database_url`).

    SQLite connections get WAL mode (readers never block the writer), a busy
    timeout, foreign keys on, and ``BEGIN IMMEDIATE`` for every transaction so
    that a read-then-write cannot deadlock against another writer.

    ``idle_transaction_timeout_s`` (PostgreSQL): the server ends a session of this engine that
    sits that long inside a transaction without sending its next statement
    (``idle_in_transaction_session_timeout``), and with it the row locks it holds. A process
    paused mid-transaction (SIGSTOP, a VM freeze) would otherwise keep its rows locked until it
    woke, and every ``SKIP LOCKED`` claim of them would pass them by. The woken process's next
    statement fails and its transaction is rolled back. Nothing on SQLite (one machine: a
    paused writer's lock is its file's, and it holds every writer up whatever is set).
    """
    url = normalise_url(url or default_database_url())
    if not (url.startswith("sqlite") or url.startswith("postgresql")):
        raise ConfigError(
            f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://HOST/DB"
        )
    if url.startswith("sqlite"):
        _create_private(sqlite_path(url))
        engine = create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "isolation_level": None},
            **options,
        )
        _configure_sqlite(engine)
        _name_a_damaged_file(engine, sqlite_path(url))
        _name_an_unwritable_store(engine, sqlite_path(url))
        return engine
    engine = create_engine(url, **{"pool_pre_ping": True, **options})
    _name_an_unwritable_store(engine, None)
    if idle_transaction_timeout_s is not None:
        if not idle_transaction_timeout_s > 0:
            raise ValueError(
                f"idle_transaction_timeout_s must be positive, got {idle_transaction_timeout_s!r}"
            )
        milliseconds = max(1, round(idle_transaction_timeout_s * 1000))
        _set_on_connect(engine, f"SET idle_in_transaction_session_timeout = {milliseconds}")
    return engine


STORE_FILE_MODE = (
    0o600  # a store holds every job's envs: its user's only (SQLite gives its -wal the same)
)


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL (``sqlite:///PATH``), or None for an in-memory or non-SQLite one."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return None
    path = url[len(prefix) :].split("?", 1)[0]
    return None if path in ("", ":memory:") or path.startswith("file:") else path


def _create_private(path: str | None) -> None:
    """Create the store's file, empty and its user's only, before SQLite creates it world-readable."""
    if path is None:
        return
    # There already, or its folder missing: SQLite says so in its own words.
    with contextlib.suppress(
        FileExistsError, FileNotFoundError, IsADirectoryError, PermissionError
    ):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, STORE_FILE_MODE))


def _name_a_damaged_file(engine: Engine, path: str | None) -> None:
    """A SQLite file that is not a database (truncated, overwritten, random bytes) is a
    :class:`ConfigError` naming the file and the fix, wherever it is first read, not SQLite's
    bare "file is not a database" from deep inside a command."""

    @event.listens_for(engine, "handle_error")
    def _on_error(context: Any) -> None:
        orig = context.original_exception
        where = path or engine.url.render_as_string(hide_password=True)
        if path is not None and os.path.isdir(path):
            raise ConfigError(
                f"the store {where} is a folder, not a SQLite file: give the path of a file "
                "(--store sqlite:///PATH), or move the folder away"
            ) from orig
        # sqlite3.OperationalError (locked, busy, cannot open) is a DatabaseError too: not damage.
        if type(orig) is not sqlite3.DatabaseError:
            return
        raise ConfigError(
            f"the store {where} is damaged ({' '.join(str(orig).split())}): restore it from a "
            f"backup, or move it away and spothop starts a new one; `spothop db status --url "
            f"sqlite:///{where}` inspects it"
        ) from orig


# SQLite's result codes for a write the disk refused (the low byte of an extended code).
SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN = 8, 10, 13, 14
# PostgreSQL's: disk_full, read_only_sql_transaction (a standby; default_transaction_read_only).
PG_DISK_FULL, PG_READ_ONLY = "53100", "25006"


def _name_an_unwritable_store(engine: Engine, path: str | None) -> None:
    """A write the store's disk refuses (full, read-only) is a :class:`StoreUnwritable` naming the
    store and the fix, not "the database did not answer" or a traceback (module docstring of
    :mod:`spothop.errors`). Which of the two is read from the error, and for SQLite from the
    file system holding the file (a full disk often reaches SQLite as "disk I/O error" when it
    cannot grow the ``-shm`` index; a read-only one as "unable to open database file")."""

    @event.listens_for(engine, "handle_error")
    def _on_error(context: Any) -> None:
        orig = context.original_exception
        where = path or engine.url.render_as_string(hide_password=True)
        why = " ".join(str(orig).split())[:300]
        if path is None:
            state = getattr(orig, "sqlstate", None)
            if state in (PG_DISK_FULL, PG_READ_ONLY):
                raise StoreUnwritable(_unwritable_line(where, state == PG_DISK_FULL, why)) from orig
            return
        if not isinstance(orig, sqlite3.OperationalError):
            return
        code = (getattr(orig, "sqlite_errorcode", 0) or 0) & 0xFF
        if code not in (SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN):
            return
        full, read_only = _disk_of(path)
        if code == SQLITE_FULL or (full and code in (SQLITE_IOERR, SQLITE_CANTOPEN)):
            raise StoreUnwritable(_unwritable_line(where, True, why)) from orig
        if read_only:
            raise StoreUnwritable(_unwritable_line(where, False, why)) from orig
        if code == SQLITE_READONLY:
            folder = os.path.dirname(os.path.abspath(path))
            raise StoreUnwritable(
                f"the store {where} cannot be written ({why}): let this user write the file and "
                f"its folder {folder} (SQLite keeps its -wal and -shm files beside it); nothing "
                "saved in it was lost"
            ) from orig


def _disk_of(path: str) -> tuple[bool, bool]:
    """(full, read-only) for the file system holding ``path`` (False, False when unknown)."""
    try:
        disk = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False, False
    read_only = bool(disk.f_flag & os.ST_RDONLY)
    return (not read_only and disk.f_bavail == 0), read_only


def _unwritable_line(where: str, full: bool, why: str) -> str:
    if full:
        return (
            f"the disk holding the store {where} is full ({why}): free space on it, then run the "
            "command again; nothing saved in the store was lost (the write that did not fit was "
            "rolled back)"
        )
    return (
        f"the store {where} is read-only ({why}): remount its disk read-write (or point "
        "SPOTHOP_HOME / --store at a writable one), then run the command again; nothing saved "
        "in the store was lost"
    )


def _set_on_connect(engine: Engine, statement: str) -> None:
    """Run the PostgreSQL ``SET`` ``statement`` on each connection ``engine`` opens (a session
    setting: the URL's own ``options``, a schema's ``search_path``, stay as they are)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(statement)
        dbapi_connection.commit()


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _enter_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _enter_wal(cursor: Any) -> None:
    """Put the file in WAL mode (it stays so), retrying while another process does the same.

    Switching a file to WAL needs its exclusive lock, and SQLite answers "database is locked" at
    once, without its busy handler, when two connections that both read the file race for it
    (waiting could deadlock them). Processes opening a new store together meet exactly that, so
    the switch is retried here, up to the busy timeout; a file already in WAL needs no lock.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause_s = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause_s)
        pause_s = min(pause_s * 2, 0.05)


_shared: dict[str, tuple[Engine, dict[str, Any]]] = {}
_shared_lock = threading.Lock()


def shared_engine(url: str, **options: Any) -> Engine:
    """One engine per URL per process (engines pool connections; make few).

    ``options`` (``pool_size``, ``max_overflow``, ...: :func:`make_engine`'s) are for a process
    that sizes its pool, the server: the engine made with them is the URL's shared one from then
    on. Without options, the URL's engine as it is (made with the defaults if there is none yet).
    """
    key = normalise_url(url)
    with _shared_lock:
        made = _shared.get(key)
        if made is None or (options and made[1] != options):
            made = (make_engine(url, **options), dict(options))
            _shared[key] = made
        return made[0]


def commit_without_waiting_for_disk(engine: Engine) -> None:
    """Every connection ``engine`` opens commits without waiting for PostgreSQL to flush its
    write-ahead log to disk (``synchronous_commit = off``): a commit is visible to every
    connection at once, as any commit, but one made in the last few hundred milliseconds
    (3 × ``wal_writer_delay``) before PostgreSQL itself crashes may be undone by the crash.
    Only for writes that are superseded soon anyway (the server's heartbeats): a flush took
    100-300 ms on a busy disk. Nothing on SQLite (its writes are local)."""
    if engine.dialect.name == "postgresql":
        _set_on_connect(engine, "SET synchronous_commit TO OFF")


def pool_options(url: str, connections: int) -> dict[str, Any]:
    """Pool options for at most ``connections`` connections at once to ``url``, each opened when
    first needed and then kept (an overflow connection closed after each burst made PostgreSQL
    start a backend for the next one); none for SQLite (its file has one writer)."""
    if connections < 1:
        raise ConfigError(f"a pool needs at least 1 connection, got {connections}")
    if not normalise_url(url).startswith("postgresql"):
        return {}
    return {"pool_size": connections, "max_overflow": 0}


def dialect_insert(dialect: str) -> Any:
    """The dialect's INSERT construct (``on_conflict_do_nothing`` / ``on_conflict_do_update`` on
    both SQLite and PostgreSQL), for ``engine.dialect.name`` or ``conn.dialect.name``."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


# What this process has done once per engine (brought its schema up to date, per schema). Keyed by the
# engine object, weakly: a dropped engine's id() is soon reused by a new one (for another database), which
# must not pass for it. (Keyed by id() once, a new SQLite file now and then had no tables: "no such table".)
_done: weakref.WeakKeyDictionary[Engine, set[Hashable]] = weakref.WeakKeyDictionary()
_done_lock = threading.Lock()


def once_per_engine(engine: Engine, key: Hashable, action: Callable[[], object]) -> None:
    """Run ``action`` unless this process already has for this engine and ``key``.

    Holds a lock meanwhile, so threads sharing an engine run it once. An action
    that raises is not recorded as done: the next call runs it again.
    """
    with _done_lock:
        done = _done.setdefault(engine, set())
        if key in done:
            return
        action()
        done.add(key)
