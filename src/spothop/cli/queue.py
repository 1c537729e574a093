"""``spothop queue``: submit and work a batch job spec, a job's shard counts, its dead letters (list, retry)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from spothop.cli.output import console, note, print_json, table
from spothop.errors import ConfigError, exit_for_counts
from spothop.queue import ShardQueue, open_queue

if TYPE_CHECKING:
    from spothop.batch import BatchSpec

URL_HELP = "queue URL: sqlite:///PATH, postgresql://HOST/DB or redis://HOST:PORT/DB (default: the embedded SQLite)"
ERROR_PREVIEW_CHARS = 80

queue_app = typer.Typer(help="The shard work queue of batch jobs.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(queue_app, name="queue")


def _open(url: str | None, job: str) -> ShardQueue:
    return open_queue(url, job)


SPEC_HELP = "batch job spec (YAML): name, input, function or command, output (docs/queue.md)"


@queue_app.command("submit")
def submit_spec(
    spec_path: Annotated[Path, typer.Argument(help=SPEC_HELP)],
    url: Annotated[
        str | None, typer.Option("--url", help=f"{URL_HELP}; overrides the spec's queue")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Split a batch job's input into shards and enqueue them; submitting again adds nothing."""
    from spothop.batch import submit

    spec = _load(spec_path, url)
    added = submit(spec)
    with _open(spec.queue, spec.name) as queue:
        counts = queue.stats()
    shards = counts.total
    if as_json:
        print_json(
            {
                "job": spec.name,
                "shards": shards,
                "added": added,
                "queue": spec.queue,
                "output": spec.output,
            }
        )
        return
    console.print(f"{spec.name}: {shards} shard(s), {added} new, output to {spec.output}")


@queue_app.command("work")
def work_spec(
    spec_path: Annotated[Path, typer.Argument(help=SPEC_HELP)],
    worker: Annotated[
        str | None, typer.Option("--worker", help="worker name (default: HOST-PID)")
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help=f"{URL_HELP}; overrides the spec's queue")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Work on a submitted batch job's shards with its function or command until none is left.

    SIGTERM (a preemption notice) releases the shard in hand and exits 0; run
    as many of these as you like, on any machines that reach the queue. Exits 5
    when some of the job's shards are dead (failed every attempt), 1 when all are.
    """
    from spothop.batch import run_worker

    spec = _load(spec_path, url)
    if spec.function is None and spec.command is None:
        raise ConfigError(
            f"{spec_path}: the spec names no 'function' (module:attribute) or 'command' to run per shard"
        )
    # As with `python -m`, a spec's `function: mypkg.embed:process` is found from the current folder.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    report = run_worker(spec, worker=worker)
    with _open(spec.queue, spec.name) as queue:
        counts = queue.stats()
    # The job's outcome, not this worker's attempts: a shard that failed once and was
    # retried to success is not a failure; a dead one is (docs/cli.md).
    code = exit_for_counts(counts.done, counts.dead)
    if as_json:
        print_json(
            {
                "job": spec.name,
                **report.to_dict(),
                "done": counts.done,
                "dead": counts.dead,
                "exit_code": code,
            }
        )
    else:
        console.print(
            f"{spec.name}: {report.committed} committed, {report.failed} failed, {report.released} released, "
            f"{report.lost} lost lease(s){' (stopped)' if report.stopped else ''}"
        )
        if counts.dead:
            note(
                f"{counts.dead} of {counts.total} shard(s) dead after their attempts, {counts.done} done: "
                f"`spothop queue dead {spec.name}` shows why, `--retry` queues them again",
                style="yellow",
                stderr=True,
            )
    if code:
        raise typer.Exit(code)


def _load(spec_path: Path, url: str | None) -> BatchSpec:
    from spothop.batch import load_spec

    spec = load_spec(spec_path)
    return spec.model_copy(update={"queue": url}) if url else spec


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
    shards: Annotated[
        list[str] | None, typer.Argument(help="with --retry: only these shards")
    ] = None,
    retry: Annotated[
        bool, typer.Option("--retry", help="make dead shards pending again with fresh attempts")
    ] = False,
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
            raise ConfigError(
                "shard ids are only taken with --retry: `spothop queue dead JOB --retry SHARD…`"
            )
        records = queue.dead()
    if as_json:
        print_json([r.to_dict() for r in records])
        return
    rows = [
        [r.id, r.attempts, r.failures, (r.last_error or "")[:ERROR_PREVIEW_CHARS]] for r in records
    ]
    console.print(
        table(
            f"dead letters of {job}",
            ["shard", "attempts", "failures", "last error"],
            rows,
            right=["attempts", "failures"],
        )
    )
