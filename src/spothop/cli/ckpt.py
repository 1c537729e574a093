"""``spothop ckpt``: list, show, verify and garbage-collect checkpoints at a URL (folder or s3://…),
and list the steps each world size committed (``worlds``)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

import typer

from spothop.checkpoint import (
    CheckpointCorrupt,
    collect,
    describe_checkpoint,
    existing_store,
    list_checkpoints,
    list_worlds,
    verify_checkpoints,
)
from spothop.cli.output import console, print_json, table
from spothop.errors import NotFoundError

URL_HELP = "checkpoint location: a folder or an fsspec URL such as s3://bucket/run"
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
SHOWN_LEAVES = 30


def _when(unix_s: float | None) -> str | None:
    if unix_s is None:
        return None
    return dt.datetime.fromtimestamp(unix_s, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _mib(size: int | None) -> str | None:
    return None if size is None else f"{size / 2**20:,.2f}"


def ls_command(
    url: Annotated[str, typer.Argument(help=URL_HELP)], as_json: JsonOpt = False
) -> None:
    """List checkpoints, oldest first: committed, damaged, or never committed."""
    infos = list_checkpoints(url)
    if as_json:
        print_json([i.to_dict() for i in infos])
        return
    rows = [
        [
            i.checkpoint_id,
            i.status,
            i.step,
            i.tier,
            i.parent,
            _when(i.wall_time_unix_s),
            _mib(i.size_bytes),
            i.reason,
        ]
        for i in infos
    ]
    console.print(
        table(
            f"checkpoints in {url}",
            ["id", "status", "step", "tier", "parent", "written (UTC)", "MiB", "note"],
            rows,
            right=["step", "MiB"],
        )
    )


def show_command(
    url: Annotated[str, typer.Argument(help=URL_HELP)],
    checkpoint_id: Annotated[
        str | None, typer.Option("--id", help="this checkpoint (default: the newest)")
    ] = None,
    all_leaves: Annotated[
        bool, typer.Option("--all-leaves", help=f"list every array, not the {SHOWN_LEAVES} largest")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show one checkpoint's manifest: step, tier, delta chain, data position, RNG, metadata and arrays."""
    detail = describe_checkpoint(url, checkpoint_id)
    if as_json:
        print_json(detail.to_dict())
        return
    facts: list[list[Any]] = [
        ["id", detail.checkpoint_id],
        ["step", detail.step],
        ["tier", detail.tier],
        ["written (UTC)", _when(detail.wall_time_unix_s)],
        ["delta chain", " → ".join(detail.chain) if detail.chain else "— (a full checkpoint)"],
        ["stored by it", f"{_mib(detail.size_bytes)} MiB"],
        ["state", f"{_mib(detail.state_bytes)} MiB in {len(detail.leaves)} arrays"],
        ["world", ", ".join(f"{k}={v}" for k, v in detail.world.items())],
        ["data position", json.dumps(detail.data_position) if detail.data_position else None],
        ["RNG states", ", ".join(detail.rng) or None],
        ["format", detail.format_version],
        *[[f"metadata: {k}", json.dumps(v)] for k, v in detail.user_metadata.items()],
    ]
    console.print(table(f"checkpoint in {url}", ["", "value"], facts))
    leaves = sorted(detail.leaves, key=lambda leaf: -leaf.raw_bytes)
    shown = leaves if all_leaves else leaves[:SHOWN_LEAVES]
    rows = [
        [
            leaf.path,
            leaf.kind,
            leaf.dtype,
            "×".join(map(str, leaf.shape)) or "scalar",
            _mib(leaf.raw_bytes),
            leaf.chunks,
            leaf.chunks_from_parents,
        ]
        for leaf in shown
    ]
    title = (
        "arrays"
        if len(shown) == len(leaves)
        else f"the {len(shown)} largest of {len(leaves)} arrays (--all-leaves for every one)"
    )
    console.print(
        table(
            title,
            ["path", "kind", "dtype", "shape", "MiB", "chunks", "from parents"],
            rows,
            right=["MiB", "chunks", "from parents"],
        )
    )


def verify_command(
    url: Annotated[str, typer.Argument(help=URL_HELP)],
    checkpoint_id: Annotated[
        str | None, typer.Option("--id", help="verify only this checkpoint")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check every byte of every committed checkpoint and its delta chain; exit 1 if any fails, 3 if the location is missing."""
    results = verify_checkpoints(url, checkpoint_id)
    if as_json:
        print_json([r.to_dict() for r in results])
    else:
        rows = [
            [r.checkpoint_id, r.step, r.tier, "ok" if r.ok else "FAILED", r.reason] for r in results
        ]
        console.print(
            table(f"verify {url}", ["id", "step", "tier", "result", "reason"], rows, right=["step"])
        )
    bad = [r for r in results if not r.ok]
    if checkpoint_id is not None and not results:
        raise NotFoundError(
            f"no checkpoint {checkpoint_id!r} under {url} (`spothop ckpt ls {url}` lists them)"
        )
    if bad:
        raise CheckpointCorrupt(
            bad[0].checkpoint_id, f"{bad[0].reason} ({len(bad)} of {len(results)} failed)"
        )


def gc_command(
    url: Annotated[str, typer.Argument(help=URL_HELP)],
    keep: Annotated[
        int, typer.Option("--keep", help="restorable delta chains to keep, newest first")
    ],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="show the plan a real run would carry out, delete nothing"),
    ] = False,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="check that files are there at their sizes instead of reading every byte",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete all but the newest N chains that restore (a full checkpoint and its deltas).

    Chains are checked newest first; a damaged one does not count and is left in place, and the
    newest checkpoint that restores is never deleted (docs/checkpoint.md)."""
    plan = collect(existing_store(url), keep, dry_run=dry_run, verify_bytes=not quick)
    if as_json:
        print_json({**plan.to_dict(), "dry_run": dry_run})
        return
    verb = "would delete" if dry_run else "deleted"
    why = dict(plan.damaged)
    rows = [
        [cid, "kept", "newest restorable" if cid == plan.newest_restorable else None]
        for cid in plan.kept
        if cid not in why
    ]
    rows += [[cid, "kept (damaged)", reason] for cid, reason in plan.damaged if cid in plan.kept]
    rows += [[cid, verb, why.get(cid)] for cid in plan.deleted]
    rows += [[cid, verb, why.get(cid, "uncommitted")] for cid in plan.partial_deleted]
    console.print(table(f"gc {url} --keep {keep}", ["id", "action", "note"], rows))


def worlds_command(
    url: Annotated[str, typer.Argument(help=URL_HELP)], as_json: JsonOpt = False
) -> None:
    """List the steps each world size committed (a multi-rank job writes URL/rank-NNNNN): which
    ranks did, and whether the step is complete, so restorable here or re-sharded elsewhere."""
    steps = list_worlds(url)
    if as_json:
        print_json([w.to_dict() for w in steps])
        return
    rows = [
        [
            w.step,
            w.world_size,
            f"{len(w.ranks)} of {w.world_size}"
            + ("" if w.complete else f" (missing {_missing(w.ranks, w.world_size)})"),
            "yes" if w.complete else "no",
            ", ".join(w.tiers),
            ", ".join(w.sharded) or None,
        ]
        for w in steps
    ]
    console.print(
        table(
            f"steps by world size in {url}",
            ["step", "world size", "ranks committed", "complete", "tiers", "sharded leaves"],
            rows,
            right=["step", "world size"],
        )
    )


def _missing(ranks: list[int], world_size: int) -> str:
    gone = [r for r in range(world_size) if r not in ranks]
    return ", ".join(map(str, gone[:8])) + (" …" if len(gone) > 8 else "")


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        name="ckpt", help="Inspect, verify and clean up checkpoints.", no_args_is_help=True
    )
    group.command("ls")(ls_command)
    group.command("show")(show_command)
    group.command("verify")(verify_command)
    group.command("gc")(gc_command)
    group.command("worlds")(worlds_command)
    app.add_typer(group)
