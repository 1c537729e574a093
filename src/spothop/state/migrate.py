"""Bring a store's schema to this code's newest revision: Alembic, run from code, under a lock.

The contract:

1. :func:`ensure_schema` is what every table owner calls when it opens a store
   (the SQL queue, the market stores, the control plane's tables). The first
   call per engine and schema in a process runs :func:`upgrade`; later calls
   return at once.
2. :func:`upgrade` is one transaction that holds the store's migration lock:
   on SQLite the write lock that every spothop transaction takes first
   (``BEGIN IMMEDIATE``, :func:`spothop.db.make_engine`), on PostgreSQL a
   transaction-scoped advisory lock on the schema. Under the lock it reads the
   store's revision again, so of two processes opening one new store at once,
   the first migrates and the second finds the work done. A failure rolls the
   whole upgrade back: DDL is transactional on both databases.
3. A store of spothop 0.1.0 (its tables, no revision) is taken as the baseline
   (revision ``0001`` creates only the tables missing) and upgraded; no table of
   it is dropped and no row lost.
4. A store at a revision this code does not know was upgraded by a newer
   spothop: :class:`~spothop.errors.StoreTooNew` names both revisions and the
   store is left as it is.
5. ``schema`` (PostgreSQL only) puts the tables and the version table in that
   schema: every transaction here sets ``search_path`` to it alone, so the
   migrations name no schema and run the same in any.

The revision is kept in ``spothop_alembic_version``, not Alembic's default
``alembic_version``, so a database shared with another application's Alembic
history cannot be mistaken for a spothop store.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, MetaData, inspect, text

from spothop.db import once_per_engine
from spothop.errors import ConfigError, StoreTooNew
from spothop.state.registry import metadata

# Alembic is imported where a store is migrated or read, not here: importing a table owner (the
# queue, the market stores, the CLI), or opening a store that is current, must not cost its ~0.1 s.
if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext, MigrationInfo
    from alembic.script import Script, ScriptDirectory

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "spothop_alembic_version"
BASELINE_REVISION = "0001"
# The newest revision in migrations/versions/, bump it with each new one (tests/state checks it is
# Alembic's head). It lets a process find a store current with one SELECT and without importing Alembic,
# which matters where a store is opened in a hurry: the agent releasing leases during a preemption.
HEAD_REVISION = "0019"
# What a store made by spothop 0.1.0 (no migrations yet) may hold: some or all of these.
RELEASE_0_1_TABLES = frozenset(
    {"market_prices", "market_interruptions", "market_exposure", "queue_jobs", "queue_shards"}
)
# First key of spothop's PostgreSQL advisory locks ("sp"); the second is the schema's hash.
PG_LOCK_CLASS = 0x7370


@dataclass(frozen=True)
class RevisionInfo:
    """One migration: its id and the first line of its docstring."""

    revision: str
    doc: str

    def to_dict(self) -> dict[str, str]:
        return {"revision": self.revision, "doc": self.doc}


@dataclass(frozen=True)
class SchemaStatus:
    """Where a store stands: its revision (None: none yet), this code's head, what is pending."""

    url: str
    schema: str | None
    current: str | None
    head: str
    pending: tuple[RevisionInfo, ...]
    previous_release: (
        bool  # tables of spothop 0.1.0 and no revision: upgrading takes them as the baseline
    )

    @property
    def up_to_date(self) -> bool:
        return not self.pending

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "schema": self.schema,
            "current": self.current,
            "head": self.head,
            "up_to_date": self.up_to_date,
            "previous_release": self.previous_release,
            "pending": [p.to_dict() for p in self.pending],
        }


@dataclass(frozen=True)
class UpgradeResult:
    """What :func:`upgrade` did: from which revision to which, applying which (none: it was current)."""

    url: str
    schema: str | None
    before: str | None
    after: str
    applied: tuple[RevisionInfo, ...]
    previous_release: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "schema": self.schema,
            "before": self.before,
            "after": self.after,
            "previous_release": self.previous_release,
            "applied": [a.to_dict() for a in self.applied],
        }


@cache
def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


@cache
def script_directory() -> ScriptDirectory:
    """spothop's migrations, read once per process."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def head_revision() -> str:
    """The newest revision this code knows (the history is one line: two heads is a bug)."""
    head = script_directory().get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations in {MIGRATIONS_DIR}")
    return head


def owned_metadata() -> MetaData:
    """The registry with every table module imported: the schema the migrations must produce."""
    import spothop.state.agent_tables
    import spothop.state.auth_tables
    import spothop.state.code_tables
    import spothop.state.job_tables
    import spothop.state.ledger_tables
    import spothop.state.log_tables
    import spothop.state.market_tables
    import spothop.state.queue_tables  # noqa: F401  (imported for the tables they register)

    return metadata


def _info(script: Script) -> RevisionInfo:
    return RevisionInfo(
        script.revision, (script.doc or "").strip().splitlines()[0] if script.doc else ""
    )


def _after(current: str | None) -> tuple[RevisionInfo, ...]:
    """The revisions from ``current`` (exclusive) up to the head, oldest first."""
    revisions = script_directory().iterate_revisions("heads", current or "base")
    return tuple(_info(s) for s in reversed(list(revisions)) if s.revision != current)


def store_url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


@contextmanager
def _transaction(engine: Engine, schema: str | None) -> Iterator[Connection]:
    """One transaction on the store, with ``schema`` first on PostgreSQL's search path."""
    with engine.begin() as conn:
        if schema is not None:
            if conn.dialect.name != "postgresql":
                raise ConfigError(
                    f"schema {schema!r}: schemas are PostgreSQL's; a {conn.dialect.name} store is"
                    " one schema per database (leave the schema out)"
                )
            conn.execute(
                text(f"SET LOCAL search_path TO {conn.dialect.identifier_preparer.quote(schema)}")
            )
        yield conn


def _lock(conn: Connection) -> None:
    """Hold the store's migration lock until the transaction ends."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:cls, hashtext(current_schema()))"),
            {"cls": PG_LOCK_CLASS},
        )
    # SQLite: the transaction began with BEGIN IMMEDIATE, the database's write lock; nothing more to take.


def _stored_revisions(conn: Connection) -> list[str]:
    """The version table's rows, read without Alembic (none: no version table yet)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return []
    return [
        str(v) for v in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars()
    ]


def _read(conn: Connection, url: str) -> tuple[str | None, bool]:
    """The store's revision (None: none) and whether it holds tables of spothop 0.1.0."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script.revision import RevisionError
    from alembic.util.exc import CommandError

    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    heads = context.get_current_heads()
    if not heads:
        tables = set(inspect(conn).get_table_names())
        return None, bool(RELEASE_0_1_TABLES & tables)
    # spothop's history is one line: an unknown revision, or two heads, can only be a newer spothop's.
    try:
        known = len(heads) == 1 and script_directory().get_revision(heads[0]) is not None
    except (CommandError, RevisionError):
        known = False
    if not known:
        raise StoreTooNew(url, ", ".join(heads), head_revision())
    return heads[0], False


def status(engine: Engine, schema: str | None = None) -> SchemaStatus:
    """Where the store stands; changes nothing. :class:`StoreTooNew` if a newer spothop upgraded it."""
    url = store_url(engine)
    with _transaction(engine, schema) as conn:
        current, previous_release = _read(conn, url)
    return SchemaStatus(url, schema, current, head_revision(), _after(current), previous_release)


def upgrade(engine: Engine, schema: str | None = None) -> UpgradeResult:
    """Migrate the store to this code's head (see the module's contract); returns what was applied."""
    url = store_url(engine)
    with _transaction(engine, schema) as conn:
        _lock(conn)
        if _stored_revisions(conn) == [HEAD_REVISION]:
            return UpgradeResult(url, schema, HEAD_REVISION, HEAD_REVISION, (), False)
    return _migrate(engine, schema, url)


def _migrate(engine: Engine, schema: str | None, url: str) -> UpgradeResult:
    """:func:`upgrade` through Alembic, for a store that is not at the head (or not known to be)."""
    from alembic.runtime.environment import EnvironmentContext

    head = head_revision()
    script = script_directory()
    applied: list[str] = []

    def record(
        ctx: MigrationContext,
        step: MigrationInfo,
        heads: Collection[Any],
        run_args: Mapping[str, Any],
    ) -> None:
        applied.extend(step.up_revision_ids)

    with _transaction(engine, schema) as conn:
        _lock(conn)
        current, previous_release = _read(conn, url)
        if current == head:
            return UpgradeResult(url, schema, current, head, (), False)
        if previous_release:
            log.info(
                "%s: tables of spothop 0.1.0 and no revision; taking them as revision %s",
                url,
                BASELINE_REVISION,
            )
        with EnvironmentContext(
            _config(),
            script,
            fn=lambda rev, _ctx: script._upgrade_revs(head, rev),
            destination_rev=head,
        ) as env:
            env.configure(
                connection=conn,
                target_metadata=metadata,
                version_table=VERSION_TABLE,
                on_version_apply=record,
            )
            with env.begin_transaction():
                env.run_migrations()
    done = tuple(_info(script.get_revision(r)) for r in applied)
    log.info("%s: schema %s → %s (%s)", url, current or "empty", head, ", ".join(applied))
    return UpgradeResult(url, schema, current, head, done, previous_release)


def differences(engine: Engine, schema: str | None = None) -> list[Any]:
    """What the store's schema lacks or has beyond :func:`owned_metadata` (Alembic's autogenerate diff).

    Empty once migrated: a table or column defined in code but created by no
    migration shows up here (``tests/state`` asserts it is empty on both databases).
    """
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with _transaction(engine, schema) as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return list(compare_metadata(context, owned_metadata()))


def ensure_schema(engine: Engine, schema: str | None = None) -> None:
    """Upgrade the store behind ``engine`` unless this process already has (once per engine and schema)."""
    once_per_engine(engine, ("spothop.state.schema", schema), lambda: upgrade(engine, schema))
