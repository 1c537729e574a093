"""``spothop ckpt ls|verify|gc`` through the real entry point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spothop.checkpoint import (
    Checkpointer,
    describe_checkpoint,
    list_checkpoints,
    verify_checkpoints,
)
from spothop.errors import EXIT_FAILED, EXIT_NOT_FOUND, NotFoundError


def make(root: Path) -> list[str]:
    ckpt = Checkpointer(str(root), keep_chains=10, chunk_bytes=256)
    ids = [ckpt.save({"w": np.full(100, s)}, s).wait().checkpoint_id for s in (1, 2)]
    changed = np.full(100, 2)
    changed[0] = 3  # the delta stores one chunk and reads the rest from its parent
    ids.append(ckpt.save({"w": changed}, 3, tier="emergency").wait().checkpoint_id)
    return ids


def test_ls_json_and_table(cli: Callable[..., Any], tmp_path: Path) -> None:
    ids = make(tmp_path)
    result = cli("ckpt", "ls", str(tmp_path), "--json")
    assert result.code == 0
    rows = result.json()
    assert [r["checkpoint_id"] for r in rows] == ids
    assert rows[2]["parent"] == ids[1] and rows[2]["tier"] == "emergency"
    table = cli("ckpt", "ls", str(tmp_path))
    assert table.code == 0 and ids[0] in table.out and "emergency" in table.out


def test_verify_passes_then_fails_with_exit_1(cli: Callable[..., Any], tmp_path: Path) -> None:
    ids = make(tmp_path)
    assert cli("ckpt", "verify", str(tmp_path)).code == 0
    (tmp_path / ids[1] / "data-00000.pack").write_bytes(b"x")
    result = cli("ckpt", "verify", str(tmp_path), "--json")
    assert result.code == EXIT_FAILED
    failed = {r["checkpoint_id"] for r in result.json() if not r["ok"]}
    assert failed == {ids[1], ids[2]}  # the delta fails too: its parent is broken
    assert "error:" in result.err and ids[1] in result.err


def test_gc_keep(cli: Callable[..., Any], tmp_path: Path) -> None:
    ids = make(tmp_path)
    dry = cli("ckpt", "gc", str(tmp_path), "--keep", "1", "--dry-run", "--json")
    assert dry.code == 0 and dry.json()["deleted"] == [ids[0]]
    assert len(cli("ckpt", "ls", str(tmp_path), "--json").json()) == 3
    assert cli("ckpt", "gc", str(tmp_path), "--keep", "1").code == 0
    assert [r["checkpoint_id"] for r in cli("ckpt", "ls", str(tmp_path), "--json").json()] == ids[
        1:
    ]
    bad = cli("ckpt", "gc", str(tmp_path), "--keep", "0")
    assert bad.code == 2 and "--keep" in bad.err


def test_show_describes_the_newest_or_a_named_checkpoint(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    ids = make(tmp_path)
    newest = cli("ckpt", "show", str(tmp_path), "--json")
    assert newest.code == 0
    detail = newest.json()
    assert (
        detail["checkpoint_id"] == ids[2]
        and detail["tier"] == "emergency"
        and detail["chain"] == [ids[1]]
    )
    [leaf] = detail["leaves"]
    assert leaf["path"] == "/w" and leaf["shape"] == [100] and leaf["raw_bytes"] == 800
    assert leaf["chunks"] == 4 and leaf["chunks_from_parents"] == 3  # one 256-byte chunk changed
    assert {"python", "numpy"} <= set(detail["rng"])
    named = cli("ckpt", "show", str(tmp_path), "--id", ids[0])
    assert (
        named.code == 0
        and ids[0] in named.out
        and "a full checkpoint" in named.out
        and "/w" in named.out
    )
    missing = cli("ckpt", "show", str(tmp_path), "--id", "step-000000000009-durable-000000")
    assert (
        missing.code == EXIT_NOT_FOUND
        and "no committed checkpoint 'step-000000000009-durable-000000'" in missing.err
    )
    (tmp_path / "empty").mkdir()
    empty = cli("ckpt", "show", str(tmp_path / "empty"))
    assert empty.code == EXIT_NOT_FOUND and "no committed checkpoint here" in empty.err


@pytest.mark.parametrize("command", ["ls", "show", "verify", "gc"])
def test_a_location_that_does_not_exist_is_not_found(
    cli: Callable[..., Any], tmp_path: Path, command: str
) -> None:
    extra = ["--keep", "1"] if command == "gc" else []
    result = cli("ckpt", command, str(tmp_path / "no-such-run"), *extra)
    assert (
        result.code == EXIT_NOT_FOUND
        and "does not exist" in result.err
        and "Traceback" not in result.err
    )


@pytest.mark.parametrize("reader", [list_checkpoints, verify_checkpoints, describe_checkpoint])
def test_inspecting_a_missing_location_raises_not_found(
    tmp_path: Path, reader: Callable[[str], Any]
) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        reader(str(tmp_path / "no-such-run"))


def test_verify_of_an_id_that_is_not_there_is_not_found(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    make(tmp_path)
    result = cli("ckpt", "verify", str(tmp_path), "--id", "step-000000000009-durable-000000")
    assert (
        result.code == EXIT_NOT_FOUND
        and "no checkpoint 'step-000000000009-durable-000000'" in result.err
    )
