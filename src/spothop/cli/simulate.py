"""``spothop simulate``: a deadline policy on spot traces, tick by tick, on a virtual clock."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from spothop.cli.output import console, note, print_json, table
from spothop.errors import ConfigError
from spothop.jobs.controller.simulated import simulate_job
from spothop.scheduler.policies import (
    DEFAULT_DEADLINE_POLICY,
    get_policy,
    policy_class,
    policy_names,
)
from spothop.scheduler.simulate import JobSetting, RunResult, Window, run
from spothop.scheduler.simulate.results import Summary
from spothop.scheduler.simulate.traces import load_runs_dir, load_zone, windows

RUNS_SHOWN = 30  # the table shows the first runs; --json lists every one
ENGINES = ("model", "controller")


def _windows(
    traces: list[Path], runs_dir: Path | None, setting: JobSetting, count: int | None, seed: int
) -> list[Window]:
    if bool(traces) == (runs_dir is not None):
        raise ConfigError(
            "give either --trace FILE (repeat it: several zones of one job) or --runs-dir DIR "
            "(each trace its own single-zone job), not both and not neither"
        )
    if count is not None and count < 1:
        raise ConfigError(f"--windows {count}: expected 1 or more windows")
    if runs_dir is not None:
        out: list[Window] = []
        for zone in load_runs_dir(runs_dir):
            out += windows([zone], setting, count, seed)
        return out
    return windows([load_zone(p) for p in traces], setting, count, seed)


def simulate(
    policy: Annotated[
        str,
        typer.Option(
            "--policy", help=f"deadline policy: {', '.join(policy_names())}", show_default=True
        ),
    ] = DEFAULT_DEADLINE_POLICY,
    trace: Annotated[
        list[Path] | None,
        typer.Option(
            "--trace",
            help="a trace file (Can't Be Late JSON, 1 = unavailable); repeat for zones the job may move between",
        ),
    ] = None,
    runs_dir: Annotated[
        Path | None,
        typer.Option("--runs-dir", help="a folder of traces: each file its own single-zone job"),
    ] = None,
    task_hours: Annotated[float, typer.Option("--task-hours", help="work to do, hours")] = 48.0,
    deadline_hours: Annotated[
        float, typer.Option("--deadline-hours", help="deadline from the job's start, hours")
    ] = 52.0,
    restart_overhead_hours: Annotated[
        float,
        typer.Option(
            "--restart-overhead-hours", help="paid on every launch, relaunch or move, hours"
        ),
    ] = 0.02,
    spot_price: Annotated[
        float,
        typer.Option("--spot-price", help="USD/h for spot where a trace carries no prices"),
    ] = 0.9731,
    on_demand_price: Annotated[float, typer.Option("--on-demand-price", help="USD/h")] = 3.06,
    window_count: Annotated[
        int | None,
        typer.Option("--windows", help="cut N random windows (per trace with --runs-dir)"),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="seed for the windows")] = 0,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="model: the fast tick model; controller: the controller's own decide on "
            "simulated instances (online policies; the same runs, 6-100x slower)",
            show_default=True,
        ),
    ] = "model",
    as_json: Annotated[
        bool, typer.Option("--json", help="print the summary and runs as JSON")
    ] = False,
) -> None:
    """Run a deadline policy on spot traces and print cost, finish time and deadlines met.

    Example: spothop simulate --policy uniform-progress --runs-dir traces/ --windows 100 --seed 0
    """
    chosen_class = policy_class(policy)  # an unknown name fails before any file is read
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
    if engine == "controller" and not chosen_class.online:
        raise ConfigError(
            f"--engine controller runs online policies only; {policy!r} sees the whole trace "
            "(use --engine model)"
        )
    setting = JobSetting.checked(
        task_hours, deadline_hours, restart_overhead_hours, spot_price, on_demand_price
    )
    chosen = _windows(list(trace or []), runs_dir, setting, window_count, seed)
    start = time.perf_counter()
    if engine == "controller":
        results: list[RunResult] = [simulate_job(policy, w, setting).result for w in chosen]
    else:
        results = [run(get_policy(policy), w, setting) for w in chosen]
    summary = Summary(policy, tuple(results), time.perf_counter() - start)
    if as_json:
        print_json(summary.to_dict())
        return
    rows = [
        [
            r.label,
            f"{r.cost_usd:.2f}",
            f"{r.finish_h:.2f}",
            "yes" if r.deadline_met else "NO",
            r.preemptions,
            f"{r.spot_hours:.2f}",
            f"{r.on_demand_hours:.2f}",
        ]
        for r in results[:RUNS_SHOWN]
    ]
    numbers = ["cost $", "finish h", "preemptions", "spot h", "on-demand h"]
    console.print(
        table(
            f"{policy}: {len(results)} runs",
            ["run", *numbers[:2], "deadline met", *numbers[2:]],
            rows,
            right=numbers,
        )
    )
    if len(results) > RUNS_SHOWN:
        note(f"{len(results) - RUNS_SHOWN} more runs: --json lists every one")
    console.print(
        f"average cost ${summary.average_cost:.2f}, deadlines met {summary.deadlines_met_fraction:.0%}, "
        f"{summary.runs_per_s:.1f} runs/s ({engine} engine)"
    )


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
