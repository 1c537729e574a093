"""The hostile-input tables' shared parts: the bad files, one row type, and a runner.

Each ``tests/cli/test_hostile_<group>.py`` lists rows: an argv (``{name}``
placeholders are filled with the paths of :func:`hostile_files`), the exit
code the row must give, the spothop error class where the command fails
in-process (``None`` when it succeeds or fails as a usage error), and a
fragment the output must contain. Every row also asserts that nothing printed
a traceback. The class is read with ``sys.exc_info()`` inside the CLI's
error printer, so the CLI itself is run unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# A path that is rich markup, "[/x]" across a folder boundary: it must neither raise nor vanish.
MARKUP_NAME = "m[/x] [red]y[bold]"
UNICODE_NAME = "ünïcødé-名前"
HUGE_BYTES = (
    8 * 1024 * 1024
)  # big enough to show a reader does not choke, small enough for a shared machine


@dataclass(frozen=True)
class Row:
    """One hostile input to one command."""

    id: str
    argv: Sequence[str]
    code: int
    error: type[BaseException] | None = None
    contains: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    marks: Sequence[Any] = ()

    def param(self) -> Any:
        return pytest.param(self, id=self.id, marks=list(self.marks))


def rows(*table: Row) -> list[Any]:
    return [row.param() for row in table]


def xfail_owner(owner: str, why: str) -> Any:
    """A row that fails because of another engineer's area: strict, so it is noticed once fixed."""
    return pytest.mark.xfail(strict=True, reason=f"{owner}: {why}")


def hostile_files(
    root: Path, suffix: str, *, valid: str, truncated: str, nan: str
) -> dict[str, str]:
    """The bad files of one format, by name: missing, empty, binary, truncated, a directory, huge,
    NaN/inf numbers, and a valid file under a unicode and under a markup name."""
    root.mkdir(parents=True, exist_ok=True)
    paths = {
        "missing": root / f"missing{suffix}",
        "empty": root / f"empty{suffix}",
        "binary": root / f"binary{suffix}",
        "truncated": root / f"truncated{suffix}",
        "dir": root / f"folder{suffix}",
        "huge": root / f"huge{suffix}",
        "nan": root / f"nan{suffix}",
        "unicode": root / f"{UNICODE_NAME}{suffix}",
        "markup": root / "m[" / f"x] [red]y[bold]{suffix}",
        "valid": root / f"valid{suffix}",
    }
    paths["markup"].parent.mkdir(exist_ok=True)
    paths["empty"].write_bytes(b"")
    paths["binary"].write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x00" * 64)
    paths["truncated"].write_text(truncated)
    paths["dir"].mkdir(exist_ok=True)
    with paths["huge"].open("wb") as handle:
        handle.write(b"x" * HUGE_BYTES)  # one line of 8 MiB, no structure
    paths["nan"].write_text(nan)
    for name in ("unicode", "markup", "valid"):
        paths[name].write_text(valid)
    return {name: str(path) for name, path in paths.items()}


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    error: type[BaseException] | None


def run_row(
    row: Row,
    files: Mapping[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Outcome:
    """Run the row's argv through ``spothop.cli.main.main`` in-process and check what every row promises."""
    import spothop.cli.main as cli_main

    seen: list[type[BaseException]] = []
    printer = cli_main.error_line

    def recording(message: str) -> None:
        exc = sys.exc_info()[1]
        if exc is not None:
            seen.append(type(exc))
        printer(message)

    monkeypatch.setattr(cli_main, "error_line", recording)
    monkeypatch.setenv("COLUMNS", "200")
    for name, value in row.env.items():
        monkeypatch.setenv(name, value.format(**files))
    argv = [part.format(**files) for part in row.argv]
    capsys.readouterr()
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    outcome = Outcome(code, captured.out, captured.err, seen[-1] if seen else None)
    check(row, outcome)
    return outcome


def check(row: Row, outcome: Outcome) -> None:
    text = outcome.out + outcome.err
    assert "Traceback" not in text and "MarkupError" not in text, text
    assert outcome.code == row.code, f"exit {outcome.code}, expected {row.code}: {text[-2000:]}"
    if row.error is not None:
        assert outcome.error is not None and issubclass(outcome.error, row.error), (
            outcome.error,
            text[-500:],
        )
    if row.contains:
        assert row.contains in " ".join(text.split()), text[-2000:]
