"""``spothop db``: spothop's own store — its schema revision (``status``) and its migrations (``upgrade``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from spothop.cli.output import console, print_json, table
from spothop.db import default_database_url, make_engine, normalise_url, sqlite_path
from spothop.errors import ConfigError, NotFoundError

URL_HELP = (
    "store URL: sqlite:///PATH or postgresql://USER@HOST/DB"
    " (default: SPOTHOP_DATABASE_URL, else $SPOTHOP_HOME/spothop.db)"
)
SCHEMA_HELP = "PostgreSQL schema holding spothop's tables (default: the connection's search path)"

db_app = typer.Typer(
    help="spothop's own store: its schema revision and migrations (docs/state.md).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")


@contextmanager
def _store(url: str | None, *, must_exist: bool) -> Iterator[Engine]:
    """An engine on the store; an unreachable one is a clear error, a missing SQLite file too if ``must_exist``."""
    if must_exist:  # looked for before an engine is made: making one creates the file
        path = sqlite_path(normalise_url(url or default_database_url()))
        if path is not None and not Path(path).exists():
            raise NotFoundError(
                f"no store at {path} yet: spothop creates it on first use,"
                " or `spothop db upgrade` creates it now"
            )
    engine = make_engine(url)
    try:
        yield engine
    except sa_exc.OperationalError as exc:
        shown = engine.url.render_as_string(hide_password=True)
        reason = " ".join(str(exc.orig).split())  # the driver's message, on one line
        raise ConfigError(
            f"cannot open the store at {shown}: {reason}; check --url or SPOTHOP_DATABASE_URL"
            " and that the database is up"
        ) from exc
    finally:
        engine.dispose()


@db_app.command("status")
def status_command(
    url: Annotated[str | None, typer.Option("--url", help=URL_HELP)] = None,
    schema: Annotated[str | None, typer.Option("--schema", help=SCHEMA_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """The store's schema revision against this spothop's newest, and the migrations pending. Changes nothing."""
    from spothop.state.migrate import status

    with _store(url, must_exist=True) as engine:
        found = status(engine, schema)
    if as_json:
        print_json(found.to_dict())
        return
    current = found.current or (
        "none (a store of spothop 0.1.0)" if found.previous_release else "none (empty)"
    )
    console.print(f"store     {found.url}" + (f" (schema {found.schema})" if found.schema else ""))
    console.print(f"revision  {current}")
    console.print(f"head      {found.head}" + ("  (up to date)" if found.up_to_date else ""))
    if found.pending:
        console.print(
            table(
                f"{len(found.pending)} pending (`spothop db upgrade` applies them)",
                ["revision", "what"],
                [(p.revision, p.doc) for p in found.pending],
            )
        )


@db_app.command("upgrade")
def upgrade_command(
    url: Annotated[str | None, typer.Option("--url", help=URL_HELP)] = None,
    schema: Annotated[str | None, typer.Option("--schema", help=SCHEMA_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Apply the pending migrations (all in one transaction); a store already at the head is left as it is.

    spothop also does this itself whenever it opens a store; this command is for
    doing it at a time of your choosing (before rolling out a new version to a
    PostgreSQL store, say). A store of spothop 0.1.0 is upgraded in place, its
    rows kept; a store upgraded by a newer spothop is refused.
    """
    from spothop.state.migrate import upgrade

    with _store(url, must_exist=False) as engine:
        done = upgrade(engine, schema)
    if as_json:
        print_json(done.to_dict())
        return
    if not done.applied:
        console.print(f"{done.url}: already at {done.after}, the newest revision; nothing to do")
        return
    if done.previous_release:
        console.print(
            f"{done.url}: a store of spothop 0.1.0, taken as the baseline; its rows are kept"
        )
    console.print(f"{done.url}: {done.before or 'empty'} → {done.after}")
    console.print(table(None, ["revision", "applied"], [(a.revision, a.doc) for a in done.applied]))


@db_app.command("prune-code")
def prune_code_command(
    url: Annotated[str | None, typer.Option("--url", help=URL_HELP)] = None,
    keep_days: Annotated[
        str | None,
        typer.Option(
            "--keep-days",
            help="keep code a job needed this many days ago or wrote since "
            "(default: SPOTHOP_CODE_KEEP_DAYS, else 7)",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="remove nothing: list what would go")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Remove packed code no job needs: the home's archives and the store's uploads.

    An archive goes when no unfinished job names it, nor one that ended within the kept days,
    and it was not packed or uploaded within them. The controller does this once a day.
    """
    from spothop.controlplane.prune import DAY_S, checked_keep_days, keep_days_setting, prune_code
    from spothop.paths import spothop_home

    days = keep_days_setting() if keep_days is None else checked_keep_days(keep_days, "--keep-days")
    with _store(url, must_exist=True) as engine:
        pruned = prune_code(engine, spothop_home(), keep_s=days * DAY_S, dry_run=dry_run)
    if as_json:
        print_json({**pruned.to_dict(), "keep_days": days})
        return
    rows = [("home file", sha[:16]) for sha in pruned.files]
    rows += [("store upload", sha[:16]) for sha in pruned.stored]
    rows += [("half-written file", name) for name in pruned.partials]
    verb = "would remove" if dry_run else "removed"
    if rows:
        console.print(table(None, ["what", "archive"], rows))
    mib = pruned.freed_bytes / (1024 * 1024)
    console.print(
        f"{verb} {len(rows)} archive(s) of code no job needs, {mib:.1f} MiB"
        f" (kept: {days:g} days); {pruned.kept_in_use} old enough but still needed by a job"
    )
