"""The error tree is drawn in one place (``spothop.errors``' docstring) and the drawing is true:
every error class spothop defines under ``SpothopError``, wherever it is defined, is drawn once,
under the parent it really has.

Read from the source (no module is imported), so an error in a module that needs an optional
extra is checked too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import spothop
import spothop.errors

ROOT = Path(spothop.__file__).parent
BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def drawn_parents(doc: str) -> dict[str, str]:
    """Each drawn class → the class drawn above it one level up."""
    parents: dict[str, str] = {}
    path = ["SpothopError"]
    for line in doc.splitlines():
        match = BRANCH.match(line.strip("\n").removeprefix("    "))
        if match is None:
            continue
        depth = len(match["indent"]) // 4 + 1
        del path[depth:]
        assert match["name"] not in parents, f"{match['name']} is drawn twice"
        parents[match["name"]] = path[-1]
        path.append(match["name"])
    return parents


def defined_parents(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """Each error class defined under SpothopError → (its first base that is an error, where)."""
    bases: dict[str, tuple[list[str], str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = [
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                ]
                bases[node.name] = (names, str(path.relative_to(root)))

    def is_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "SpothopError":
            return True
        if name not in bases or name in seen:
            return False
        return any(is_error(b, seen | {name}) for b in bases[name][0])

    return {
        name: (next(b for b in names if is_error(b)), where)
        for name, (names, where) in bases.items()
        if name != "SpothopError" and is_error(name)
    }


def test_every_error_is_drawn_under_its_real_parent() -> None:
    drawn = drawn_parents(spothop.errors.__doc__ or "")
    defined = defined_parents()
    missing = sorted(
        f"{name} ({where})" for name, (_, where) in defined.items() if name not in drawn
    )
    assert not missing, f"errors missing from the drawing in spothop/errors.py: {missing}"
    wrong = sorted(
        f"{name}: drawn under {drawn[name]}, defined under {parent} ({where})"
        for name, (parent, where) in defined.items()
        if drawn[name] != parent
    )
    assert not wrong, "\n".join(wrong)
    stale = sorted(set(drawn) - set(defined))
    assert not stale, f"drawn but defined nowhere: {stale}"


def test_the_check_reads_a_drawing_and_finds_an_undrawn_error(tmp_path: Path) -> None:
    doc = (
        "    SpothopError\n"
        "    ├── ConfigError      x\n"
        "    │   └── Deep         y\n"
        "    └── Other            z\n"
    )
    assert drawn_parents(doc) == {
        "ConfigError": "SpothopError",
        "Deep": "ConfigError",
        "Other": "SpothopError",
    }
    (tmp_path / "m.py").write_text(
        "class SpothopError(Exception): ...\n"
        "class ConfigError(SpothopError): ...\n"
        "class New(ConfigError, ValueError): ...\n"
        "class Plain(ValueError): ...\n"
    )
    assert defined_parents(tmp_path) == {
        "ConfigError": ("SpothopError", "m.py"),
        "New": ("ConfigError", "m.py"),
    }
