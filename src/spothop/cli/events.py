"""``spothop events``: every lifecycle event, from the agents and the controller, as one stream.

``--job J`` keeps one job's; ``--follow`` keeps printing as events arrive;
``--json`` prints one JSON object per line (JSON Lines, so ``--follow`` can
be piped); ``--mtbf`` prints the mean time between interruptions per provider
and instance type instead. See ``docs/observe.md``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from spothop.cli.output import console, note, print_json, table
from spothop.cli.remote import ServerClient, ServerOption, TokenOption, connect
from spothop.cli.report import StoreOption
from spothop.errors import ConfigError
from spothop.service.events import stream_events

if TYPE_CHECKING:
    from spothop.jobs.store import JobStore
    from spothop.observe.events import StreamEvent

FOLLOW_INTERVAL_S = 0.5


def register(app: typer.Typer) -> None:
    app.command("events")(events)


def events(
    job_id: Annotated[str | None, typer.Option("--job", help="one job's events (j-…)")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON Lines: one event a line")] = False,
    show_mtbf: Annotated[
        bool, typer.Option("--mtbf", help="mean time between interruptions per provider and type")
    ] = False,
    store_url: StoreOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """The interruption event stream: time, instance, provider, zone, type, cause, lead time, saves."""
    from spothop.jobs.store import JobStore

    client = connect(server, token)
    if client is not None:
        if show_mtbf:
            raise ConfigError(
                "--mtbf reads the embedded store's ledger; with --server, `spothop report "
                "--by market` sums the server's, or drop --server"
            )
        _stream(_RemoteStream(client, job_id).read, follow, as_json)
        return
    from spothop.db import store_to_read

    with JobStore(store_to_read(store_url)) as store:
        if show_mtbf:
            if job_id is not None:
                from spothop.observe.job_report import find_job

                find_job(store, job_id)  # an unknown job says so, with the nearest ids
            _mtbf(store, job_id, as_json)
            return
        cursor: list[Any] = [None]

        def read() -> list[dict[str, Any]]:
            page = stream_events(store, job_id, cursor[0])
            cursor[0] = page.next
            return page.to_list()

        _stream(read, follow, as_json)


def _stream(read: Callable[[], list[dict[str, Any]]], follow: bool, as_json: bool) -> None:
    from spothop.observe.events import StreamEvent

    batch = read()
    _print([StreamEvent(**e) for e in batch], as_json)
    if not batch and not follow and not as_json:
        note("no events yet")
    while follow:
        time.sleep(FOLLOW_INTERVAL_S)
        _print([StreamEvent(**e) for e in read()], as_json)


PAGE = 1000  # events a call asks the server for (its most: spothop.server.settings.MAX_LIST_LIMIT)


class _RemoteStream:
    """The server's event stream, one job's or every job's (job by job, merged by time).

    The server's ``next`` cursor is followed where it gives one; otherwise each read asks from
    the start and keeps the events not printed yet (an event's whole dict is its identity).
    """

    def __init__(self, client: ServerClient, job_id: str | None) -> None:
        self.client = client
        self.job_id = job_id
        self.cursors: dict[str, str | None] = {}
        self.seen: set[str] = set()

    def read(self) -> list[dict[str, Any]]:
        ids = [self.job_id] if self.job_id else [j["job_id"] for j in self.client.jobs()]
        out = []
        for job in ids:
            while True:  # page after page: the server answers at most PAGE events a call
                batch, nxt = self.client.events(job, self.cursors.get(job), limit=PAGE)
                if nxt is not None:
                    self.cursors[job] = nxt
                for event in batch:
                    key = json.dumps(event, sort_keys=True, default=str)
                    if key not in self.seen:
                        self.seen.add(key)
                        out.append(event)
                if nxt is None or len(batch) < PAGE:
                    break
        out.sort(key=lambda e: (e["time_unix_s"], e["source"], e["kind"]))
        return out


def _print(batch: Sequence[StreamEvent], as_json: bool) -> None:
    if as_json:
        for event in batch:
            sys.stdout.write(json.dumps(event.to_dict(), default=str) + "\n")
        sys.stdout.flush()
        return
    for e in batch:
        stamp = time.strftime("%H:%M:%S", time.localtime(e.time_unix_s))
        where = " ".join(x for x in (e.provider, e.zone, e.instance_type) if x)
        extra = []
        if e.cause:
            extra.append(f"cause {e.cause}")
        if e.lead_time_s is not None:
            extra.append(f"lead {e.lead_time_s:.1f}s")
        if e.saved:
            extra.append(f"saved {e.saved}")
        if e.save_s is not None:
            extra.append(f"save {e.save_s:.2f}s")
        if e.recomputed_shards:
            extra.append(f"{e.recomputed_shards} shards back to the queue")
        console.print(
            Text.assemble(
                (stamp, "dim"),
                " ",
                (e.job_id, "bold"),
                f" {e.source:<10} {e.kind:<22} ",
                e.instance_id or "",
                f" {where}" if where else "",
                ("  " + ", ".join(extra)) if extra else "",
            )
        )


def _mtbf(store: JobStore, job_id: str | None, as_json: bool) -> None:
    from spothop.observe.events import mtbf
    from spothop.observe.ledger import Ledger

    attempts = store.attempts(job_id)
    records = Ledger(store).records(job_id)
    rows = mtbf(attempts, records)
    if as_json:
        print_json([r.to_dict() for r in rows])
        return
    console.print(
        table(
            "mean time between interruptions",
            ["provider", "type", "running h", "interruptions", "attempts", "MTBF h"],
            [
                (
                    r.provider,
                    r.instance_type,
                    f"{r.running_s / 3600:.3f}",
                    r.interruptions,
                    r.attempts,
                    "none seen" if r.mtbf_s is None else f"{r.mtbf_s / 3600:.3f}",
                )
                for r in rows
            ],
            right=["running h", "interruptions", "attempts", "MTBF h"],
        )
    )
