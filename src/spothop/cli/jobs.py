"""``spothop launch | status | jobs | logs | cancel``: jobs (their controller: :mod:`.controller`).

``launch`` stores the job, starts this home's controller in the background if
none runs, and follows the job live (Ctrl-C detaches: the job goes on);
``--detach`` returns at once. Everything else reads the job store; ``cancel``
asks the controller to end the job (it terminates the instances). See
``docs/jobs.md``. With ``--server`` (``$SPOTHOP_SERVER``) every one of them asks
``spothop server`` instead (:mod:`spothop.cli.remote`), the same output either
way: both sides build it with :mod:`spothop.service`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.text import Text

from spothop.cli.job_file import (
    EnvOption,
    ExplainOption,
    SecretOption,
    env_overrides,
    secret_overrides,
    show_dialect,
)
from spothop.cli.output import console, note, print_json, table
from spothop.cli.remote import ServerClient, ServerOption, TokenOption, connect
from spothop.errors import EXIT_FAILED, EXIT_OK, NotFoundError
from spothop.service.jobs import job_status, list_jobs, request_cancel
from spothop.service.launch import check_launchable, launch_job
from spothop.service.logs import LogTail, job_logs

if TYPE_CHECKING:
    from spothop.jobs.store import JobStore

JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="SPOTHOP_DATABASE_URL",
        help="job store URL: sqlite:///PATH or postgresql://HOST/DB (default: the home's SQLite)",
    ),
]
QueueOption = Annotated[
    str | None,
    typer.Option(
        "--queue-url",
        envvar="SPOTHOP_QUEUE_URL",
        help="batch jobs' shard queue: a database URL or redis://HOST:PORT/DB (default: the store)",
    ),
]
FOLLOW_INTERVAL_S = 0.5
REASON_SHOWN = 60  # characters of a reason in the table of ``jobs``; a failed job's is noted whole


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)
    app.command("status")(status)
    app.command("jobs")(jobs)
    app.command("logs")(logs)
    app.command("cancel")(cancel)


def _store(url: str | None) -> JobStore:
    from spothop.jobs.store import JobStore

    return JobStore(url)


def _read_store(url: str | None, job_id: str | None = None) -> JobStore:
    """The store for a command that only reads: never created (:func:`spothop.db.store_to_read`);
    a missing one, asked for ``job_id``, is that job not found."""
    from spothop.db import store_to_read

    try:
        return _store(store_to_read(url))
    except NotFoundError as exc:
        if job_id is None:
            raise
        raise NotFoundError(f"no job {job_id}: {exc}") from None


def _store_url(url: str | None) -> str:
    from spothop.db import default_database_url

    return url or default_database_url()


# -- launch ---------------------------------------------------------------------------


def launch(
    job_file: Annotated[Path, typer.Argument(help="job file (YAML): spothop's or a SkyPilot task")],
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="return once the job is stored")
    ] = False,
    as_json: JsonOption = False,
    store_url: StoreOption = None,
    queue_url: QueueOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    env: EnvOption = None,
    secret: SecretOption = None,
    explain: ExplainOption = False,
) -> int:
    """Launch a job: store it, make sure the controller runs, follow it (Ctrl-C detaches).

    Exits 0 when the job succeeds, 1 when it fails or is cancelled; with
    --detach, 0 once it is stored (--json prints {"job_id": ...}).
    """
    from spothop.jobs.spec import load_job

    # The spec errors, and its paths resolved here, either way.
    spec = load_job(job_file, env=env_overrides(env), secrets=secret_overrides(secret))
    show_dialect(job_file, spec, explain, stderr=as_json)
    client = connect(server, token)
    if client is not None:
        from spothop.cli.upload import upload_code

        # The code packed here and uploaded (the server does not read this machine's paths),
        # then the resolved spec (JSON is YAML), naming the archives.
        code = upload_code(client, spec)
        job_id = client.launch(_with_secret_values(spec), job_file.name, code)["job_id"]
    else:
        job_id = _launch_here(spec, store_url, queue_url)
    if detach:
        if as_json:
            print_json({"job_id": job_id})
        else:
            console.print(Text.assemble("launched ", (job_id, "bold"), f" ({spec.name})"))
            note(f"follow it: spothop status {job_id} · spothop logs {job_id} --follow")
        return EXIT_OK
    if client is not None:
        return _follow(lambda events: client.status(job_id), job_id, as_json)
    with _store(_store_url(store_url)) as store:
        return _follow(
            lambda events: job_status(store, job_id, events=events).to_dict(), job_id, as_json
        )


def _with_secret_values(spec: Any) -> str:
    """The spec as JSON for the server, its secrets' values with it (the server seals them;
    the request is the one place they travel, over the server's own connection)."""
    if not spec.secrets:
        return str(spec.to_json())
    data = json.loads(spec.to_json())
    data["secrets"] = spec.secret_values
    return json.dumps(data)


def _launch_here(spec: Any, store_url: str | None, queue_url: str | None) -> str:
    """Store the job in the embedded store and make sure this home's controller runs."""
    from spothop.jobs.controller import daemon
    from spothop.state.wake import poke

    check_launchable(spec, loopback_control_plane=True)
    if queue_url and spec.batch is not None:
        _probe_queue(queue_url)
    url = _store_url(store_url)
    with _store(url) as store:
        job_id = launch_job(store, spec).job_id
    extra = ("--queue-url", queue_url) if queue_url else ()
    info = daemon.start_background(store_url=url, extra_args=extra)
    if info.store_url and info.store_url != url:
        note(
            f"the running controller (pid {info.pid}) uses the store {info.store_url}, not {url}: "
            "it will not see this job; stop it (`spothop controller stop`) and launch again",
            "yellow",
            stderr=True,
        )
    poke()
    return job_id


def _probe_queue(queue_url: str) -> None:
    """The batch job's queue answers before the job is stored: an unreachable ``--queue-url``
    would leave it pending forever, its shards never enqueued (one error line, exit 4)."""
    from spothop.errors import SpothopError
    from spothop.queue import open_queue
    from spothop.queue.errors import UnknownJobError

    try:
        with open_queue(queue_url, "spothop-launch-probe") as queue:
            queue.stats()
    except UnknownJobError:
        return  # it answered: no queue of that name, as expected
    except SpothopError as exc:
        exc.args = (f"--queue-url: {exc}; nothing was stored (check the URL and the server)",)
        raise


def _follow(fetch: Callable[[bool], dict[str, Any]], job_id: str, as_json: bool) -> int:
    """Follow the job until it ends (``fetch(events)`` is its ``status --json``, from the store
    or the server); Ctrl-C detaches."""
    from rich.live import Live

    from spothop.jobs.lifecycle import JobState

    try:
        if as_json:
            data = fetch(False)
            while not JobState(data["state"]).final:
                time.sleep(FOLLOW_INTERVAL_S)
                data = fetch(False)
            data = fetch(True)
            print_json(data)
        else:
            with Live(console=console, refresh_per_second=4, transient=False) as live:
                while True:
                    data = fetch(False)
                    live.update(_progress(data))
                    if JobState(data["state"]).final:
                        break
                    time.sleep(FOLLOW_INTERVAL_S)
            if not console.is_terminal:
                # Off a terminal the live view's last frame ends without a line break (rich
                # adds one only on a terminal): the verdict below would join its last line.
                console.line()
    except KeyboardInterrupt:
        note(
            f"detached; {job_id} goes on (spothop status {job_id}, spothop cancel {job_id})",
            stderr=True,
        )
        return EXIT_OK
    if not as_json:
        reason = data.get("reason")
        console.print(
            Text.assemble((job_id, "bold"), f" {data['state']}", f": {reason}" if reason else "")
        )
    return EXIT_OK if data["state"] == str(JobState.SUCCEEDED) else EXIT_FAILED


def _progress(data: dict[str, Any]) -> Group:
    per_provider: dict[str, int] = {}
    for i in data["instances"]:
        if i["state"] != "ended":
            per_provider[i["provider"]] = per_provider.get(i["provider"], 0) + 1
    where = ", ".join(f"{n}× {p}" for p, n in sorted(per_provider.items()))
    if not where:  # every instance ended: say how many ran, not "none yet"
        ran = len(data["instances"])
        where = f"none now ({ran} ran)" if ran else "none yet"
    lines = [
        Text.assemble((data["job_id"], "bold"), f" {data['name']}: ", (data["state"], "cyan")),
        Text(f"instances: {where}"),
        Text(f"preemptions: {data['interruptions']}  ·  spend so far ≈ ${data['spend_usd']:.4f}"),
    ]
    queue = data.get("queue")
    if queue:
        lines.append(
            Text(
                f"shards: {queue['done']} done, {queue['leased']} in work, "
                f"{queue['pending']} pending, {queue['dead']} dead"
            )
        )
    progress = data.get("progress") or {}
    if progress.get("step") is not None:
        lines.append(Text(f"training step: {progress['step']}"))
    if data.get("reason"):
        lines.append(Text(f"reason: {data['reason']}", style="dim"))
    return Group(*lines)


# -- status and jobs ------------------------------------------------------------------


def status(
    job_id: Annotated[str | None, typer.Argument(help="job id (j-…); none: every job")] = None,
    as_json: JsonOption = False,
    store_url: StoreOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """A job's state, instances (provider, zone, type, market) and events; or every job."""
    if job_id is None:
        jobs(as_json=as_json, store_url=store_url, server=server, token=token)
        return
    client = connect(server, token)
    if client is not None:
        data = client.status(job_id)
    else:
        with _read_store(store_url, job_id) as store:
            data = job_status(store, job_id).to_dict()
    if as_json:
        print_json(data)
        return
    _show_status(data)


# The ends status explains under the table, each with its attempt's line ("setup failed (exit 9)").
_SAYS_WHY = {"failed": "failed", "agent_lost": "lost its agent", "worker_failed": "ended"}


def _show_status(data: dict[str, Any]) -> None:
    console.print(_progress(data))
    if data.get("secrets"):
        shown = " ".join(f"{name}={mask}" for name, mask in data["secrets"].items())
        console.print(Text(f"secrets: {shown}", style="dim"))
    rows = [
        (
            i["instance_id"] or "(launching)",
            i["node"],
            i["provider"],
            i["zone"] or i["region"],  # a regional cloud's instances have no zone
            i["instance_type"],
            i["market"],
            i["state"] if i["end_reason"] is None else f"ended: {i['end_reason']}",
        )
        for i in data["instances"]
    ]
    console.print(
        table(
            "instances", ["instance", "node", "provider", "zone", "type", "market", "state"], rows
        )
    )
    for i in data["instances"][-5:]:
        if i["end_reason"] in _SAYS_WHY and i.get("end_detail"):
            what = _SAYS_WHY[i["end_reason"]]
            note(f"instance {i['instance_id'] or '(never named)'} {what}: {i['end_detail']}")
    for failure in data["launch_failures"][-5:]:
        place = failure["zone"] or failure["region"]
        where = f"{failure['provider']}/{place} {failure['instance_type']}"
        if failure.get("refused"):  # the message is the error's whole text, its fix included
            note(
                f"launch refused in {where} (it repeats on every {failure['provider']} launch): "
                f"{failure['error_message']}"
            )
        else:
            note(f"launch failed in {where}: {failure['error_code']}: {failure['error_message']}")
    recent = data["events"][-10:]
    console.print(
        table(
            "recent events",
            ["seq", "time", "event", "data"],
            [
                (
                    e["seq"],
                    time.strftime("%H:%M:%S", time.localtime(e["time_unix_s"])),
                    e["kind"],
                    json.dumps(e["data"], default=str)[:100],
                )
                for e in recent
            ],
            right=["seq"],
        )
    )


def jobs(
    as_json: JsonOption = False,
    store_url: StoreOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Every job of the store: id, name, kind, state, preemptions, when created."""
    client = connect(server, token)
    if client is not None:
        records = client.jobs()
    else:
        import os

        from spothop.db import DATABASE_URL_ENV

        try:
            with _read_store(store_url) as store:
                records = list_jobs(store).to_list()
        except NotFoundError:
            if store_url or os.environ.get(DATABASE_URL_ENV):
                raise  # a store named that is not there: a typo, said so
            records = []  # this home has no store yet: no jobs
    if as_json:
        print_json(records)
        return
    if not records:
        note("no jobs yet: spothop launch JOB.yaml")
        return
    console.print(
        table(
            None,
            ["job", "name", "kind", "state", "preemptions", "created", "reason"],
            [
                (
                    r["job_id"],
                    r["name"],
                    r["kind"],
                    r["state"],
                    r["interruptions"],
                    time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_unix_s"])),
                    str(r["reason"] or "")[:REASON_SHOWN],
                )
                for r in records
            ],
            right=["preemptions"],
        )
    )
    for r in records:  # a failed job's reason in full: the cloud's message and its fix
        if r["state"] == "failed" and len(str(r["reason"] or "")) > REASON_SHOWN:
            note(f"{r['job_id']} failed: {r['reason']}")


# -- logs -----------------------------------------------------------------------------


def logs(
    job_id: Annotated[str, typer.Argument(help="job id (j-…)")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing until the job ends")
    ] = False,
    node: Annotated[int | None, typer.Option("--node", min=0, help="only this node")] = None,
    tail: Annotated[
        int | None,
        typer.Option(
            "--tail", min=0, metavar="BYTES", help="only the last BYTES of each attempt's output"
        ),
    ] = None,
    as_json: JsonOption = False,
    store_url: StoreOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """The worker's output across every recovery: each attempt's log, oldest first (what the
    agents shipped to the control plane)."""
    client = connect(server, token)
    with contextlib.ExitStack() as stack:
        store = None if client is not None else stack.enter_context(_read_store(store_url, job_id))
        if as_json:
            if client is not None:
                print_json(client.logs(job_id, node, tail))
            else:
                print_json(job_logs(store, job_id, node, tail).to_list())  # type: ignore[arg-type]
            return
        chunks = (
            _remote_chunks(client, job_id, node, tail)
            if client
            else _local_chunks(store, job_id, node, tail)
        )
        shown: set[str] = set()
        while True:
            for entry, text in chunks():
                if entry["attempt_id"] not in shown:
                    shown.add(entry["attempt_id"])
                    note(
                        f"── node {entry['node']} · attempt {entry['attempt_id']} · {entry['provider']} "
                        f"{entry['zone']} {entry['instance_type']} ({entry['market']}) ──"
                    )
                if text:
                    console.file.write(text)
                    console.file.flush()
            if not follow or _final(client, store, job_id):
                return
            time.sleep(FOLLOW_INTERVAL_S)


Chunks = Callable[[], Iterator[tuple[dict[str, Any], str]]]


def _local_chunks(store: Any, job_id: str, node: int | None, tail_bytes: int | None) -> Chunks:
    """Each call: every attempt that shipped output, with what it gained since the last call."""
    tail = LogTail(store, job_id, node, tail_bytes)  # JobNotFound (exit 3): no such job

    def chunks() -> Iterator[tuple[dict[str, Any], str]]:
        for entry in tail.read():
            yield entry.to_dict(), entry.log

    return chunks


def _remote_chunks(
    client: ServerClient, job_id: str, node: int | None, tail_bytes: int | None
) -> Chunks:
    """Each call: the server's logs (``logs --json``), each with what it gained since the last."""
    seen: dict[str, int] = {}

    def chunks() -> Iterator[tuple[dict[str, Any], str]]:
        for entry in client.logs(job_id, node, tail_bytes):
            text = str(entry.get("log") or "")
            if entry["attempt_id"] not in seen and not text:
                continue  # no output yet: the embedded store shows an attempt once its log exists
            start = seen.get(entry["attempt_id"], 0)
            seen[entry["attempt_id"]] = len(text)
            yield entry, text[start:]

    return chunks


def _final(client: ServerClient | None, store: Any, job_id: str) -> bool:
    from spothop.jobs.lifecycle import JobState

    if client is not None:
        return JobState(client.status(job_id)["state"]).final
    return bool(store.get_job(job_id).state.final)


# -- cancel ---------------------------------------------------------------------------


def cancel(
    job_id: Annotated[str, typer.Argument(help="job id (j-…)")],
    as_json: JsonOption = False,
    store_url: StoreOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel a job: the controller terminates its instances and marks it cancelled."""
    client = connect(server, token)
    if client is not None:
        answer = client.cancel(job_id)
    else:
        from spothop.jobs.controller import daemon
        from spothop.state.wake import poke

        url = _store_url(store_url) if store_url else None
        with _read_store(url, job_id) as store:  # a store that is not there holds no such job
            answer = request_cancel(store, job_id).to_dict()
        url = url or _store_url(None)
        daemon.start_background(store_url=url)
        poke()
    if as_json:
        print_json(answer)
    else:
        console.print(f"{job_id}: cancel requested; the controller terminates its instances")
