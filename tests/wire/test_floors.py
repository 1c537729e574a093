"""Where the contract sits: ``wire/`` on the ground floor, ``controlplane/`` above it, the agent beside.

Every import in a file counts, an import inside a function included.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import spothop

ROOT = Path(spothop.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _offences(package: str, allowed: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / package).rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not name.startswith(allowed)
        and name != "spothop"
    )


def test_the_wire_imports_only_the_standard_library_and_the_error_tree() -> None:
    assert _offences("wire", ("spothop.wire", "spothop.errors")) == []


def test_the_control_plane_package_imports_only_the_standard_library() -> None:
    assert [
        name
        for name in _imports(ROOT / "controlplane" / "__init__.py")
        if name.split(".")[0] not in sys.stdlib_module_names
        and name not in ("spothop._lazy",)
        and not name.startswith(("spothop.controlplane.", "spothop.wire."))  # TYPE_CHECKING only
    ] == []


def test_the_control_plane_never_imports_the_agent() -> None:
    assert [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / "controlplane").rglob("*.py")
        for name in _imports(path)
        if name.startswith("spothop.agent")
    ] == []


def test_the_agent_never_imports_the_back_end() -> None:
    back_end = ("spothop.queue", "spothop.market", "spothop.state", "spothop.server", "spothop.db")
    assert [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / "agent").rglob("*.py")
        for name in _imports(path)
        if name.startswith(back_end)
    ] == []
