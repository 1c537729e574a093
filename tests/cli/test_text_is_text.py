"""User text prints as given: rich markup in a name or a path neither raises nor vanishes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spothop.cli.output import error_line, note, table

MARKUP = "[/x] [red]kept[/red] :smile: [bold]"


def test_error_lines_and_notes_print_markup_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    error_line(f"cannot read {MARKUP}")
    note(MARKUP, stderr=True)
    err = capsys.readouterr().err
    assert err.count(MARKUP) == 2 and err.startswith("error: cannot read")


def test_table_titles_and_cells_are_text(capsys: pytest.CaptureFixture[str]) -> None:
    from spothop.cli.output import console

    console.print(table(f"checkpoints in {MARKUP}", [MARKUP], [[MARKUP]]))
    out = capsys.readouterr().out
    assert "[/x]" in out and "[red]kept[/red]" in out and ":smile:" in out


def test_a_missing_file_named_with_markup_is_one_clear_line(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    missing = tmp_path / "[red]topo[/red]" / "[/x].txt"
    result = cli("topo", "parse", str(missing))
    assert result.code in (2, 3)
    assert "[red]topo[/red]" in result.err and "[/x].txt" in result.err
    assert "Traceback" not in result.err and "MarkupError" not in result.err


def test_an_import_report_keeps_markup_in_its_file_name(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    folder = tmp_path / "[red]lambda[bold]"
    folder.mkdir()
    (folder / "vms.csv").write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\n"
        "gpu_1x_a10,A10,1,30,200,0.75,us-east-1\n"
    )
    result = cli("catalog", "import", "--dry-run", "--provider", "lambda", str(folder / "vms.csv"))
    assert result.code == 0, result.err
    assert "[red]lambda[bold]" in " ".join(result.out.split())


def test_an_error_is_one_line_in_a_file_or_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    long = "no capacity for this type in any zone of the world, " * 10  # 510 characters
    error_line(long.strip())
    assert capsys.readouterr().err == f"error: {long.strip()}\n"


def test_the_live_views_last_frame_ends_its_line_before_the_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from rich.console import Console

    from spothop.cli import jobs

    out = io.StringIO()
    monkeypatch.setattr(jobs, "console", Console(file=out, width=200, markup=False))
    done = {
        "job_id": "j-33ae64",
        "name": "embed",
        "state": "succeeded",
        "interruptions": 0,
        "spend_usd": 0.0,
        "instances": [{"provider": "p1", "state": "ended"}],
        "reason": "every shard is done and the outputs are published",
    }
    assert jobs._follow(lambda events: done, "j-33ae64", False) == 0
    lines = out.getvalue().splitlines()
    assert lines[-2:] == [
        "reason: every shard is done and the outputs are published",
        "j-33ae64 succeeded: every shard is done and the outputs are published",
    ]
    assert "instances: none now (1 ran)" in lines
