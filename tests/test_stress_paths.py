"""`make test-stress` collects the e2e tests from the Makefile's STRESS_PATHS, the suite marks them by
tests/conftest.py's E2E_PATHS: the two must name the same test files, or a stress run would skip
an e2e test (or import the rest of the suite for nothing)."""

from __future__ import annotations

import re

from tests.conftest import E2E_PATHS, PROJECT_ROOT


def stress_patterns() -> list[str]:
    """STRESS_PATHS's entries as glob patterns (``$(wildcard PATTERN)`` unwrapped)."""
    text = (PROJECT_ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(r"^STRESS_PATHS\s*:=(.*)$", text, re.MULTILINE)
    assert match, "the Makefile has no STRESS_PATHS"
    return re.sub(r"\$\(wildcard\s+([^)]*)\)", r"\1", match.group(1)).split()


def test_the_stress_run_collects_exactly_the_e2e_test_files() -> None:
    stressed: set[str] = set()
    for pattern in stress_patterns():
        for path in PROJECT_ROOT.glob(pattern):
            found = path.rglob("test_*.py") if path.is_dir() else [path]
            stressed |= {p.relative_to(PROJECT_ROOT).as_posix() for p in found}
    every = {
        p.relative_to(PROJECT_ROOT).as_posix() for p in PROJECT_ROOT.glob("tests/**/test_*.py")
    }
    assert stressed == {p for p in every if p.startswith(E2E_PATHS)}
