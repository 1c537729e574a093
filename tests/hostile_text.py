"""Hypothesis strategies for hostile versions of real files: real samples cut, spliced and garbled.

A parser's property test draws either arbitrary text or a real sample (a few
dozen lines of a file from the shared data) damaged one to three times:
truncated, a line dropped, doubled or swapped, a span replaced by junk (NaN,
infinities, huge numbers, brackets, quotes, separators, NUL, non-ASCII, a lone
surrogate that :func:`write_hostile` turns into a byte that is not UTF-8), or a
number replaced by one of those. Damaged real files reach much further into a
parser than random text, which its first check refuses.

``PROPERTY_SETTINGS`` bounds every suite: few examples, a deadline per example
(a hang fails the test rather than stalling it), scaled for a loaded machine.
Examples are drawn afresh on each run (a failure prints the example and the
seed to replay it, and hypothesis's database replays it first next time), so
runs together cover more than any one run does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.conftest import SHARED_DATA
from tests.waiting import scaled

PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=timedelta(seconds=scaled(2.0)),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FAST_PARSER_SETTINGS = settings(
    PROPERTY_SETTINGS, max_examples=250
)  # for parsers of a millisecond per example

JUNK = (
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "-Infinity",
    "1e309",
    "-1",
    "0",
    "1e300",
    "99999999999999999999",
    "",
    " ",
    ",",
    ",,",
    '"',
    "'",
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    "<",
    ">",
    "</",
    "\x00",
    "\t",
    "é",
    "漢",
    "\ufeff",
    "\udcff",
    "\r",
    "\n",
    "[/x]",
    "[red]",
    "True",
    "null",
    "--",
    "..",
    "/",
    "\\",
    "9999",
    "1e12",
    "2100",
    "-0",
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

junk_text = st.one_of(st.sampled_from(JUNK), st.text(max_size=12))


def head(text: str, lines: int = 40) -> str:
    """The first ``lines`` lines of ``text``, keeping its line endings (samples stay small and fast)."""
    return "".join(text.splitlines(keepends=True)[:lines])


@st.composite
def _damaged_once(draw: st.DrawFn, text: str) -> str:
    lines = text.splitlines(keepends=True) or [""]
    # Numbers and spans are where parsers break most; lines and cuts where they give up early.
    kind = draw(
        st.sampled_from(
            ("truncate", "drop", "double", "swap", "splice", "splice", "number", "number", "number")
        )
    )
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    at = draw(st.integers(0, len(lines) - 1))
    if kind == "drop":
        return "".join(lines[:at] + lines[at + 1 :])
    if kind == "double":
        return "".join(lines[: at + 1] + lines[at:])
    if kind == "swap":
        other = draw(st.integers(0, len(lines) - 1))
        lines[at], lines[other] = lines[other], lines[at]
        return "".join(lines)
    if kind == "number":
        numbers = list(_NUMBER.finditer(text))
        if numbers:
            match = numbers[draw(st.integers(0, len(numbers) - 1))]
            return text[: match.start()] + draw(junk_text) + text[match.end() :]
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, min(len(text), start + 20)))
    return text[:start] + draw(junk_text) + text[end:]


@st.composite
def _damaged(draw: st.DrawFn, samples: Sequence[str]) -> str:
    text = draw(st.sampled_from(list(samples)))
    for _ in range(draw(st.integers(0, 3))):
        text = draw(_damaged_once(text))
    return text


def hostile(samples: Sequence[str]) -> st.SearchStrategy[str]:
    """A real sample damaged up to three times (most examples), or arbitrary text."""
    return st.one_of(_damaged(samples), _damaged(samples), _damaged(samples), st.text(max_size=200))


def write_hostile(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` as UTF-8, lone surrogates (``\\udcff``) becoming the raw bytes they stand for."""
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    return path


def shared_sample(*parts: str) -> Path:
    """A shared data file read at import time (a module's samples); the whole module is skipped
    when the shared data is not there, as :func:`tests.conftest.shared_path` skips one test."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(
            f"shared data {path} not present (set SPOTHOP_SHARED_DATA)", allow_module_level=True
        )
    return path
