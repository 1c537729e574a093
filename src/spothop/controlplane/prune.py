"""Pruning packed code: the archives no job needs any more.

Every launch packs its ``workdir`` and its uploaded ``file_mounts`` into archives named by their
sha256: files under ``<home>/files/code/`` (:mod:`.archives`), and, for a launch through the
server, rows of the store (:mod:`spothop.state.code_archives`). Nothing else removes them, so a
team that launches edited code all day would fill its disk and its database. :func:`prune_code`
removes an archive when

1. no job names it (its ``code_sha256``, or a mount of its ``mounts_json``) that is not final,
   or that ended less than ``keep_s`` ago (a finished job's code stays a while: to look into, or
   to launch again unchanged without packing or uploading anything); and
2. it was last written or uploaded (a file's mtime, which packing the same bytes again renews;
   an archive's storing or any project's latest upload of it) ``keep_s`` ago or more: a launch
   packs its code before it stores its job, and an archive just packed is never taken for one
   that no job needs.

A stored archive goes in one transaction, its ``code_archives`` row with its chunks and its
projects' rows: a reader finds it whole or not at all, and a client that launches with it later
is told the server lacks it and uploads it again (``spothop launch --server`` does that itself).
A packing or fetching left half-done (``.packing-*``, ``.fetching-*``: a process killed mid-way)
goes once it is as old.

The controller prunes once a day (:class:`DailyCodePrune`, after a pass; never fatal), keeping
``SPOTHOP_CODE_KEEP_DAYS`` days (default 7); ``spothop db prune-code`` does it now, or shows what
it would do (``--dry-run``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.engine import Engine

from spothop.controlplane.archives import code_dir
from spothop.errors import ConfigError
from spothop.jobs.lifecycle import JobState
from spothop.jobs.records import mount_sha256s
from spothop.state.code_tables import code_archive_chunks as chunks_t
from spothop.state.code_tables import code_archive_projects as projects_t
from spothop.state.code_tables import code_archives as archives_t
from spothop.state.job_tables import jobs as jobs_t

if TYPE_CHECKING:
    from spothop.jobs.controller.views import Observation
    from spothop.jobs.store import JobStore
    from spothop.providers.base import Provider

log = logging.getLogger(__name__)

KEEP_DAYS_ENV = "SPOTHOP_CODE_KEEP_DAYS"
DEFAULT_KEEP_DAYS = 7.0
MAX_KEEP_DAYS = 36_500.0  # a hundred years: "keep everything", bounded
DAY_S = 86_400.0
FINAL_STATES = tuple(state.value for state in JobState if state.final)
PARTIAL_PREFIXES = (".packing-", ".fetching-")
ARCHIVE_SUFFIX = ".tar.gz"


@dataclass
class Pruned:
    """What one prune removed (or, in a dry run, would remove)."""

    files: list[str] = field(default_factory=list)  # sha256 of each home archive
    partials: list[str] = field(default_factory=list)  # names of half-written files
    stored: list[str] = field(default_factory=list)  # sha256 of each store archive
    freed_bytes: int = 0
    kept_in_use: int = 0  # archives old enough, kept because a job still names them
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "partials": self.partials,
            "stored": self.stored,
            "freed_bytes": self.freed_bytes,
            "kept_in_use": self.kept_in_use,
            "dry_run": self.dry_run,
        }


def keep_days_setting(environ: Mapping[str, str] = os.environ) -> float:
    """``SPOTHOP_CODE_KEEP_DAYS`` (default 7): a number of days, 0 to 36,500; anything else is a
    :class:`~spothop.errors.ConfigError` naming the variable."""
    raw = environ.get(KEEP_DAYS_ENV, "").strip()
    if not raw:
        return DEFAULT_KEEP_DAYS
    return checked_keep_days(raw, f"{KEEP_DAYS_ENV}={raw!r:.40}")


def checked_keep_days(value: object, what: str) -> float:
    """``value`` as days to keep unused code, or a ConfigError naming ``what``."""
    try:
        days = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        days = math.nan
    if not (0 <= days <= MAX_KEEP_DAYS):
        raise ConfigError(
            f"{what} is not a number of days from 0 to {MAX_KEEP_DAYS:,.0f}: how long code no "
            f"job needs is kept (default {DEFAULT_KEEP_DAYS:g})"
        )
    return days


def referenced(engine: Engine, since_unix_s: float) -> set[str]:
    """The sha256 of every archive a job names that is not final, or that ended at or after
    ``since_unix_s``: its workdir's, and each uploaded mount's."""
    query = select(jobs_t.c.code_sha256, jobs_t.c.mounts_json).where(
        or_(jobs_t.c.code_sha256.is_not(None), jobs_t.c.mounts_json.is_not(None)),
        or_(jobs_t.c.state.not_in(FINAL_STATES), jobs_t.c.updated_unix_s >= since_unix_s),
    )
    named: set[str] = set()
    with engine.connect() as conn:
        for code_sha256, mounts_json in conn.execute(query):
            if code_sha256:
                named.add(str(code_sha256))
            named.update(_mount_shas(mounts_json))
    return named


def _mount_shas(mounts_json: str | None) -> frozenset[str]:
    try:
        return mount_sha256s(mounts_json)
    except (ValueError, TypeError, AttributeError):
        return (
            frozenset()
        )  # unreadable: it names nothing this can read (the job's own error says so)


def prune_code(
    engine: Engine,
    home: Path,
    *,
    keep_s: float,
    now: float | None = None,
    dry_run: bool = False,
) -> Pruned:
    """Remove the archives no job needs (the module's rules) from ``home`` and the store over
    ``engine``; what was removed. ``dry_run``: remove nothing, say what would go."""
    now = time.time() if now is None else now
    cutoff = now - keep_s
    needed = referenced(engine, cutoff)
    pruned = Pruned(dry_run=dry_run)
    _prune_files(code_dir(home), needed, cutoff, pruned)
    _prune_stored(engine, needed, cutoff, pruned)
    return pruned


def _prune_files(folder: Path, needed: set[str], cutoff: float, pruned: Pruned) -> None:
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    for entry in sorted(entries, key=lambda e: e.name):
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            stat = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed meanwhile
        if stat.st_mtime >= cutoff:
            continue
        name = entry.name
        if name.startswith(PARTIAL_PREFIXES):
            listed = pruned.partials
        elif name.endswith(ARCHIVE_SUFFIX):
            sha256 = name.removesuffix(ARCHIVE_SUFFIX)
            if sha256 in needed:
                pruned.kept_in_use += 1
                continue
            listed, name = pruned.files, sha256
        else:
            continue  # not spothop's: left alone
        if not pruned.dry_run:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
        listed.append(name)
        pruned.freed_bytes += stat.st_size


def _prune_stored(engine: Engine, needed: set[str], cutoff: float, pruned: Pruned) -> None:
    uploaded = (
        select(projects_t.c.sha256, func.max(projects_t.c.uploaded_unix_s).label("at"))
        .group_by(projects_t.c.sha256)
        .subquery()
    )
    query = (
        select(archives_t.c.sha256, archives_t.c.size_bytes)
        .select_from(archives_t.outerjoin(uploaded, uploaded.c.sha256 == archives_t.c.sha256))
        .where(
            archives_t.c.stored_unix_s < cutoff,
            or_(uploaded.c.at.is_(None), uploaded.c.at < cutoff),
        )
        .order_by(archives_t.c.sha256)
    )
    with engine.connect() as conn:
        old = [(str(sha), int(size)) for sha, size in conn.execute(query)]
    for sha256, size in old:
        if sha256 in needed:
            pruned.kept_in_use += 1
            continue
        if not pruned.dry_run:
            with engine.begin() as conn:  # the row, its chunks, its projects: whole or not at all
                gone = conn.execute(
                    delete(archives_t).where(
                        archives_t.c.sha256 == sha256, archives_t.c.stored_unix_s < cutoff
                    )
                ).rowcount
                if not gone:
                    continue  # stored again meanwhile
                conn.execute(delete(chunks_t).where(chunks_t.c.sha256 == sha256))
                conn.execute(delete(projects_t).where(projects_t.c.sha256 == sha256))
        pruned.stored.append(sha256)
        pruned.freed_bytes += size


class DailyCodePrune:
    """The controller's after-pass hook: :func:`prune_code` at most once every ``interval_s``
    (the first pass included), keeping ``SPOTHOP_CODE_KEEP_DAYS``; a failure is logged, never
    raised (the next day tries again)."""

    def __init__(
        self,
        home: Path,
        *,
        interval_s: float = DAY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.home = home
        self.interval_s = interval_s
        self.clock = clock
        self.keep_s = keep_days_setting() * DAY_S  # a bad value stops the controller's start
        self.last: float | None = None

    def __call__(
        self,
        store: JobStore,
        _providers: Mapping[str, Provider],
        _observation: Observation | None,
    ) -> None:
        now = self.clock()
        if self.last is not None and now - self.last < self.interval_s:
            return
        self.last = now
        try:
            pruned = prune_code(store.engine, self.home, keep_s=self.keep_s)
        except Exception:  # a day's pruning missed is no reason to stop a pass
            log.exception("pruning unused code failed; tried again in a day")
            return
        removed = len(pruned.files) + len(pruned.stored) + len(pruned.partials)
        if removed:
            log.info(
                "pruned %d archive(s) of code no job needs (%d bytes)",
                removed,
                pruned.freed_bytes,
            )
