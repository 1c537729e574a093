"""``spothop launch | status | jobs | logs | cancel | controller``: jobs and their controller.

``launch`` stores the job, starts this home's controller in the background if
none runs, and follows the job live (Ctrl-C detaches: the job goes on);
``--detach`` returns at once. Everything else reads the job store; ``cancel``
asks the controller to end the job (it terminates the instances). See
``docs/jobs.md``.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.text import Text

from spothop.cli.output import console, note, print_json, table
from spothop.errors import EXIT_FAILED, EXIT_OK
from spothop.jobs.errors import JobFinished

if TYPE_CHECKING:
    from spothop.jobs.store import JobStore

controller_app = typer.Typer(
    help="This home's controller: the background process that runs every job.",
    no_args_is_help=True,
)

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


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)
    app.command("status")(status)
    app.command("jobs")(jobs)
    app.command("logs")(logs)
    app.command("cancel")(cancel)
    app.add_typer(controller_app, name="controller")


def _store(url: str | None) -> JobStore:
    from spothop.jobs.store import JobStore

    return JobStore(url)


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
) -> int:
    """Launch a job: store it, make sure the controller runs, follow it (Ctrl-C detaches).

    Exits 0 when the job succeeds, 1 when it fails or is cancelled; with
    --detach, 0 once it is stored (--json prints {"job_id": ...}).
    """
    from spothop.jobs.controller import daemon
    from spothop.jobs.reachable import check_reachable
    from spothop.jobs.spec import load_job
    from spothop.state.wake import poke

    spec = load_job(job_file)
    check_reachable(spec)  # before anything is paid for
    _check_placeable(spec)
    url = _store_url(store_url)
    with _store(url) as store:
        job_id = store.create_job(spec)
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
    if detach:
        if as_json:
            print_json({"job_id": job_id})
        else:
            console.print(Text.assemble("launched ", (job_id, "bold"), f" ({spec.name})"))
            note(f"follow it: spothop status {job_id} · spothop logs {job_id} --follow")
        return EXIT_OK
    return _follow(url, job_id, as_json)


def _check_placeable(spec: Any) -> None:
    """:class:`~spothop.scheduler.errors.NoCandidates` (exit 2) naming the requirement that excluded
    the most offerings, when no offering of the controller's providers meets the spec at all.
    No capacity *now* is not refused: the job is stored and waits for it."""
    from spothop.jobs.controller.daemon import default_providers
    from spothop.jobs.controller.place import plan_inputs
    from spothop.scheduler.market_view import gather_market_view
    from spothop.scheduler.placement import rank

    providers = [p for n, p in default_providers().items() if n not in spec.providers.deny]
    profile, kinds, pools = plan_inputs(spec)
    view = gather_market_view(providers, on_error=lambda *_: None)
    from spothop.scheduler.errors import NoCapacityNow

    with contextlib.suppress(NoCapacityNow):
        rank(view, spec.requirements(), profile, kinds, reserved=pools).raise_if_empty()


def _follow(url: str, job_id: str, as_json: bool) -> int:
    from rich.live import Live

    from spothop.jobs.lifecycle import JobState

    with _store(url) as store:
        try:
            if as_json:
                while not store.get_job(job_id).state.final:
                    time.sleep(FOLLOW_INTERVAL_S)
                print_json(job_status(store, job_id))
            else:
                with Live(console=console, refresh_per_second=4, transient=False) as live:
                    while True:
                        data = job_status(store, job_id, events=False)
                        live.update(_progress(data))
                        if JobState(data["state"]).final:
                            break
                        time.sleep(FOLLOW_INTERVAL_S)
        except KeyboardInterrupt:
            note(
                f"detached; {job_id} goes on (spothop status {job_id}, spothop cancel {job_id})",
                stderr=True,
            )
            return EXIT_OK
        final = store.get_job(job_id)
    if not as_json:
        console.print(
            Text.assemble(
                (job_id, "bold"), f" {final.state}", f": {final.reason}" if final.reason else ""
            )
        )
    return EXIT_OK if final.state is JobState.SUCCEEDED else EXIT_FAILED


def _progress(data: dict[str, Any]) -> Group:
    per_provider: dict[str, int] = {}
    for i in data["instances"]:
        if i["state"] != "ended":
            per_provider[i["provider"]] = per_provider.get(i["provider"], 0) + 1
    where = ", ".join(f"{n}× {p}" for p, n in sorted(per_provider.items())) or "none yet"
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


def job_status(store: JobStore, job_id: str, *, events: bool = True) -> dict[str, Any]:
    """A job as ``status --json`` prints it: state, interruptions, instances, events, spend."""
    job = store.get_job(job_id)
    attempts = store.attempts(job_id)
    clocks: dict[str, float] = {}
    instances = []
    spend = 0.0
    for a in attempts:
        if a.running_unix_s is not None:
            # Attempt times are on the provider's clock (jobs/controller/clock.py): so is "now".
            until = a.ended_unix_s if a.ended_unix_s is not None else _now_on(a.provider, clocks)
            spend += a.price_usd_per_hour * max(0.0, until - a.running_unix_s) / 3600
        if a.instance_id is None and a.end_reason is not None:
            continue  # a launch that failed: in the events, not an instance
        instances.append(
            {
                "instance_id": a.instance_id,
                "attempt_id": a.attempt_id,
                "node": a.node,
                "provider": a.provider,
                "region": a.region,
                "zone": a.zone,
                "instance_type": a.instance_type,
                "market": str(a.market_kind),
                "state": str(a.state),
                "end_reason": None if a.end_reason is None else str(a.end_reason),
                "price_usd_per_hour": a.price_usd_per_hour,
                "exit_code": a.exit_code,
            }
        )
    # An interruption: the cloud took the instance, or noticed it would (a notice handed over
    # to a replacement by make-before-break counts too: the cloud was taking it).
    interruptions = sum(
        1 for a in attempts if str(a.end_reason) == "preempted" or a.noticed_unix_s is not None
    )
    out: dict[str, Any] = {
        "job_id": job.job_id,
        "name": job.name,
        "kind": job.kind,
        "state": str(job.state),
        "reason": job.reason,
        "interruptions": max(interruptions, job.interruptions),
        "on_demand_forced": job.on_demand_forced,
        "created_unix_s": job.created_unix_s,
        "updated_unix_s": job.updated_unix_s,
        "nodes": [n.to_dict() for n in job.nodes],
        "instances": instances,
        "launch_failures": [
            {
                "attempt_id": a.attempt_id,
                "provider": a.provider,
                "zone": a.zone,
                "instance_type": a.instance_type,
                "error_code": a.error_code,
                "error_message": a.error_message,
            }
            for a in attempts
            if a.end_reason is not None and str(a.end_reason) == "launch_failed"
        ],
        "spend_usd": round(spend, 6),
        "queue": _queue(job),
    }
    out["progress"] = _job_progress(store, job.job_id, out["queue"])
    if events:
        out["events"] = [e.to_dict() for e in store.events(job_id)]
    return out


def _now_on(provider: str, cache: dict[str, float]) -> float:
    """Now on ``provider``'s clock: a local cloud's simulated one, the wall for every real cloud
    (making a real cloud's adapter would look for credentials; its clock is the wall anyway)."""
    if provider not in cache:
        from spothop.jobs.controller.clock import provider_now
        from spothop.jobs.controller.daemon import LOCAL_FAMILY
        from spothop.providers.registry import get_provider, members

        made: Any = None
        if provider in members(LOCAL_FAMILY):
            try:
                made = get_provider(provider)
            except Exception:  # no world here: the wall
                made = None
        cache[provider] = provider_now(made)
    return cache[provider]


def _job_progress(store: JobStore, job_id: str, queue: dict[str, int] | None) -> dict[str, Any]:
    """``progress`` of ``status --json``: ``step``, the training step the job's workers last
    reported through their agents' heartbeats (the newest beat that carried one; null when no
    worker reported a step), and for a batch job ``shards_done`` and ``shards_total``."""
    from sqlalchemy import select

    from spothop.state.agent_tables import agent_heartbeats

    t = agent_heartbeats
    with store.engine.connect() as conn:
        row = conn.execute(
            select(t.c.worker_step)
            .where(t.c.job_id == job_id, t.c.worker_step.is_not(None))
            .order_by(t.c.time_unix_s.desc())
            .limit(1)
        ).first()
    out: dict[str, Any] = {"step": None if row is None else int(row[0])}
    if queue is not None:
        out["shards_done"] = queue["done"]
        out["shards_total"] = sum(queue.values())
    return out


def _queue(job: Any) -> dict[str, int] | None:
    if job.kind != "batch":
        return None
    from spothop.jobs.controller.daemon import status as controller_status
    from spothop.jobs.controller.observe import queue_stats

    info = controller_status()
    stats = queue_stats(None if info is None else _controller_queue(info), job.job_id)
    if stats is None:
        return None
    return {
        "pending": stats.pending,
        "leased": stats.leased,
        "done": stats.done,
        "dead": stats.dead,
    }


def _controller_queue(info: Any) -> str | None:
    url = info.queue_url or info.store_url
    return None if url is None else str(url)


def status(
    job_id: Annotated[str | None, typer.Argument(help="job id (j-…); none: every job")] = None,
    as_json: JsonOption = False,
    store_url: StoreOption = None,
) -> None:
    """A job's state, instances (provider, zone, type, market) and events; or every job."""
    if job_id is None:
        jobs(as_json=as_json, store_url=store_url)
        return
    with _store(store_url) as store:
        data = job_status(store, job_id)
    if as_json:
        print_json(data)
        return
    console.print(_progress(data))
    rows = [
        (
            i["instance_id"] or "(launching)",
            i["node"],
            i["provider"],
            i["zone"],
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
    for failure in data["launch_failures"][-5:]:
        note(
            f"launch failed in {failure['provider']}/{failure['zone']} {failure['instance_type']}: "
            f"{failure['error_code']}: {failure['error_message']}"
        )
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


def jobs(as_json: JsonOption = False, store_url: StoreOption = None) -> None:
    """Every job of the store: id, name, kind, state, preemptions, when created."""
    with _store(store_url) as store:
        records = store.list_jobs()
    if as_json:
        print_json([r.to_dict() for r in records])
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
                    r.job_id,
                    r.name,
                    r.kind,
                    str(r.state),
                    r.interruptions,
                    time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_unix_s)),
                    r.reason[:60],
                )
                for r in records
            ],
            right=["preemptions"],
        )
    )


# -- logs -----------------------------------------------------------------------------


def logs(
    job_id: Annotated[str, typer.Argument(help="job id (j-…)")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing until the job ends")
    ] = False,
    node: Annotated[int | None, typer.Option("--node", min=0, help="only this node")] = None,
    as_json: JsonOption = False,
    store_url: StoreOption = None,
) -> None:
    """The worker's output across every recovery: each attempt's log, oldest first."""
    from spothop.jobs.launcher import attempt_log_path

    with _store(store_url) as store:
        store.get_job(job_id)  # UnknownJob (exit 3) for a job that does not exist
        if as_json:
            print_json(
                [
                    {
                        "attempt_id": a.attempt_id,
                        "node": a.node,
                        "instance_id": a.instance_id,
                        "provider": a.provider,
                        "log": _read(attempt_log_path(job_id, a.node, a.attempt_id)),
                    }
                    for a in store.attempts(job_id)
                    if node is None or a.node == node
                ]
            )
            return
        offsets: dict[str, int] = {}
        while True:
            for a in store.attempts(job_id):
                if node is not None and a.node != node:
                    continue
                path = attempt_log_path(job_id, a.node, a.attempt_id)
                if not path.exists():
                    continue
                if a.attempt_id not in offsets:
                    offsets[a.attempt_id] = 0
                    note(
                        f"── node {a.node} · attempt {a.attempt_id} · {a.provider} {a.zone} "
                        f"{a.instance_type} ({a.market_kind}) ──"
                    )
                with open(path, "rb") as handle:
                    handle.seek(offsets[a.attempt_id])
                    chunk = handle.read()
                if chunk:
                    offsets[a.attempt_id] += len(chunk)
                    console.file.write(chunk.decode("utf-8", errors="replace"))
                    console.file.flush()
            if not follow or store.get_job(job_id).state.final:
                return
            time.sleep(FOLLOW_INTERVAL_S)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


# -- cancel ---------------------------------------------------------------------------


def cancel(
    job_id: Annotated[str, typer.Argument(help="job id (j-…)")],
    as_json: JsonOption = False,
    store_url: StoreOption = None,
) -> None:
    """Cancel a job: the controller terminates its instances and marks it cancelled."""
    from spothop.jobs.controller import daemon
    from spothop.state.wake import poke

    url = _store_url(store_url)
    with _store(url) as store:
        job = store.get_job(job_id)
        if job.state.final:
            raise JobFinished(
                f"job {job_id} is already {job.state}; there is nothing to cancel "
                f"(spothop status {job_id} shows how it ended)"
            )
        store.record_event(job_id, "cancel_requested", {"by": "spothop cancel"})
    daemon.start_background(store_url=url)
    poke()
    if as_json:
        print_json({"job_id": job_id, "cancel_requested": True})
    else:
        console.print(f"{job_id}: cancel requested; the controller terminates its instances")


# -- the controller -------------------------------------------------------------------


@controller_app.command("run")
def controller_run(
    store_url: StoreOption = None,
    queue_url: QueueOption = None,
    period: Annotated[
        float | None,
        typer.Option(
            "--period", min=0.05, max=3600, help="seconds between passes with no event (default 10)"
        ),
    ] = None,
    poll_only: Annotated[
        bool,
        typer.Option("--poll-only", help="ignore wake-ups: pass every --period only (benchmarks)"),
    ] = False,
    providers: Annotated[
        str | None,
        typer.Option("--providers", help="comma-separated provider names (default: all)"),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=1, max=65535, help="serve Prometheus /metrics here"),
    ] = None,
) -> int:
    """Run the controller in the foreground (what `spothop launch` starts in the background)."""
    from spothop.jobs.controller import daemon
    from spothop.observe.ledger import close_books
    from spothop.observe.metrics import serve

    # The front wires observability in: the ledger's books after every pass, and /metrics.

    names = tuple(p.strip() for p in providers.split(",") if p.strip()) if providers else ()
    return daemon.run_controller(
        store_url=store_url,
        queue_url=queue_url,
        period_s=period,
        poll_only=poll_only,
        providers=names,
        metrics_port=metrics_port,
        after_pass=(close_books,),
        serve_metrics=serve,
    )


@controller_app.command("status")
def controller_status(as_json: JsonOption = False) -> None:
    """Whether this home's controller runs, and which (pid, store, log)."""
    from spothop.jobs.controller import daemon

    info = daemon.status()
    if as_json:
        print_json({"running": info is not None, **(info.to_dict() if info else {})})
        return
    if info is None:
        note("no controller runs for this home (spothop launch starts one)")
        return
    console.print(f"controller pid {info.pid}, store {info.store_url}, log {info.log}")


@controller_app.command("stop")
def controller_stop(as_json: JsonOption = False) -> None:
    """Stop this home's controller; jobs and instances go on, the next controller adopts them."""
    from spothop.jobs.controller import daemon

    info = daemon.stop()
    if as_json:
        print_json({"stopped": info is not None, **(info.to_dict() if info else {})})
        return
    if info is None:
        note("no controller runs for this home")
    else:
        console.print(f"stopped the controller (pid {info.pid}); its jobs go on")
