"""Rooms of a readable size (STYLE.md "Shape"): every source file under 600 lines, every function
under 80.

A function is measured by its body, from its first statement (docstring included) to its last
line: a long parameter list (a typer command's options, one per line) is its signature, not its
logic. The test lists every offender, so a split can be planned from its output.
"""

from __future__ import annotations

import ast
from pathlib import Path

import spothop

ROOT = Path(spothop.__file__).parent
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def offenders(root: Path = ROOT) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root)
        lines = len(text.splitlines())
        if lines >= MAX_FILE_LINES:
            out.append(f"{rel}: {lines} lines (under {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                body = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
                if body >= MAX_FUNCTION_LINES:
                    out.append(
                        f"{rel}:{node.lineno} {node.name}(): a body of {body} lines "
                        f"(under {MAX_FUNCTION_LINES})"
                    )
    return out


def test_every_file_and_function_is_of_a_readable_size() -> None:
    found = offenders()
    assert not found, "\n".join(found)


def test_the_check_sees_a_long_file_and_a_long_body_but_not_a_long_signature(
    tmp_path: Path,
) -> None:
    params = "".join(f"    p{i}: int = 0,\n" for i in range(100))
    (tmp_path / "signature.py").write_text(f"def f(\n{params}) -> None:\n    pass\n")
    (tmp_path / "body.py").write_text("def g():\n" + "    x = 1\n" * 80)
    (tmp_path / "long.py").write_text("x = 1\n" * 600)
    assert offenders(tmp_path) == [
        "body.py:1 g(): a body of 80 lines (under 80)",
        "long.py: 600 lines (under 600)",
    ]
