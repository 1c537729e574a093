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
