"""The layers of DESIGN.md: a package imports only the layers below it, lazy imports included.

Every ``import spothop.X`` and ``from spothop.X import …`` anywhere in a file counts (an
import inside a function is still a dependency). The observability layer is wired into the
controller by the front that starts it (``spothop controller run`` passes the ledger's books
and the metrics server), so ``jobs/`` never imports ``observe/``. The one exception is old
and documented (docs/design-notes.md): the market's stores register their tables on the
state layer's one metadata and migration history.
"""

from __future__ import annotations

import ast
from pathlib import Path

import spothop

ROOT = Path(spothop.__file__).parent

# floor of each package (DESIGN.md "The layers"); a package may import only floors ≤ its own.
FLOOR = {
    "errors": 0,
    "paths": 0,
    "db": 0,
    "bounds": 0,
    "resources": 1,
    "market": 2,
    "providers": 3,
    "state": 4,
    "queue": 5,
    "batch": 5,
    "scheduler": 6,
    "jobs": 7,
    "observe": 8,
    "dashboard": 9,
    "server": 9,
    "cli": 9,
}
# The on-instance packages sit beside the control plane: never the decision, jobs or front.
ON_INSTANCE = ("agent", "checkpoint", "worker")
ABOVE_INSTANCE = ("scheduler", "jobs", "observe", "dashboard", "server", "cli")
DOCUMENTED = {
    ("market/tables.py", "spothop.state.migrate"),
    ("market/tables.py", "spothop.state.registry"),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _offences() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        top = rel.parts[0].removesuffix(".py")
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[0] != "spothop" or len(parts) < 2 or (rel.as_posix(), name) in DOCUMENTED:
                continue
            target = parts[1]
            if top in FLOOR and target in FLOOR and FLOOR[target] > FLOOR[top]:
                out.append(f"{rel}:{line} ({top}) imports {name} (a layer above)")
            if top in ON_INSTANCE and target in ABOVE_INSTANCE:
                out.append(f"{rel}:{line} (on the instance) imports {name}")
    return out


def test_every_package_imports_only_the_layers_below_it() -> None:
    assert not _offences(), "\n".join(_offences())


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from spothop.observe.ledger import close_books\n")
    assert _imports(sample) == [(2, "spothop.observe.ledger")]
