"""``spothop queue``: a job's shard counts, and its dead letters (list, retry)."""

from __future__ import annotations

from typing import Annotated

import typer

from spothop.cli.output import console, print_json, table
from spothop.errors import ConfigError
from spothop.queue import ShardQueue, open_queue

URL_HELP = "queue URL: sqlite:///PATH, postgresql://HOST/DB or redis://HOST:PORT/DB (default: the embedded SQLite)"
ERROR_PREVIEW_CHARS = 80

queue_app = typer.Typer(help="The shard work queue of batch jobs.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(queue_app, name="queue")


def _open(url: str | None, job: str) -> ShardQueue:
    return open_queue(url, job)


@queue_app.command("stats")
def stats(
    job: Annotated[str, typer.Argument(help="the job (queue) name")],
    url: Annotated[str | None, typer.Option("--url", help=URL_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Shards of JOB by state, with attempts, failures, releases (preemptions) and reclaims."""
    with _open(url, job) as queue:
        counts = queue.stats().as_dict()
    if as_json:
        print_json(counts)
        return
    names = [k for k in counts if k != "job"]
    console.print(table(f"queue {job}", names, [[counts[k] for k in names]], right=names))


@queue_app.command("dead")
def dead(
    job: Annotated[str, typer.Argument(help="the job (queue) name")],
    shards: Annotated[list[str] | None, typer.Argument(help="with --retry: only these shards")] = None,
    retry: Annotated[bool, typer.Option("--retry", help="make dead shards pending again with fresh attempts")] = False,
    url: Annotated[str | None, typer.Option("--url", help=URL_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List JOB's dead letters, or with --retry put them (or the SHARDs named) back in the queue."""
    with _open(url, job) as queue:
        if retry:
            count = queue.retry_dead(shards or None)
            if as_json:
                print_json({"job": job, "retried": count})
            else:
                console.print(f"{count} dead shard(s) of {job} queued again")
            return
        if shards:
            raise ConfigError("shard ids are only taken with --retry: `spothop queue dead JOB --retry SHARD…`")
        records = queue.dead()
    if as_json:
        print_json([{"id": r.id, "attempts": r.attempts, "failures": r.failures, "releases": r.releases,
                     "last_error": r.last_error, "payload": r.payload} for r in records])
        return
    rows = [[r.id, r.attempts, r.failures, (r.last_error or "")[:ERROR_PREVIEW_CHARS]] for r in records]
    console.print(table(f"dead letters of {job}", ["shard", "attempts", "failures", "last error"], rows,
                        right=["attempts", "failures"]))
