"""The layers of DESIGN.md: a package imports only the layers below it, lazy imports included,
and no module imports itself back through others (no import circle).

Every ``import spothop.X`` and ``from spothop.X import …`` anywhere in a file counts (an
import inside a function is still a dependency), and nothing is exempt. The observability
layer is wired into the controller by the front that starts it (``spothop controller run``
passes the ledger's books and the metrics server), so ``jobs/`` never imports ``observe/``.
``docs/design-notes.md`` ("The layers, as the code has them") says why each floor is where it
is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import spothop

ROOT = Path(spothop.__file__).parent

# floor of each package (DESIGN.md "The layers"); a package may import only floors ≤ its own.
FLOOR = {
    # ground: the error tree, where files live, the one engine factory, the agent's wire contract
    "errors": 0,
    "paths": 0,
    "db": 0,
    "bounds": 0,
    "processes": 0,
    "_lazy": 0,
    "wire": 0,
    "resources": 1,
    "state": 2,  # every table spothop owns; imports nothing above the ground floor
    "market": 3,
    "providers": 4,
    "queue": 5,
    "batch": 5,
    "scheduler": 6,
    "jobs": 7,
    "observe": 8,
    "controlplane": 9,
    "service": 10,
    "dashboard": 11,
    "server": 11,
    "cli": 12,  # the program's entry: `spothop server run` starts the server
    "__main__": 12,  # `python -m spothop`: the command line, as the `spothop` script
    "testing": 12,  # for users' tests: may use anything, and nothing of spothop uses it
}
# The on-instance packages sit beside the control plane: never the decision, jobs, services or
# fronts; and the agent reaches the back end only through the control plane's client.
ON_INSTANCE = ("agent", "checkpoint", "worker")
ABOVE_INSTANCE = ("scheduler", "jobs", "observe", "service", "dashboard", "server", "cli")
NOT_FROM_AGENT = ("queue", "market", "state", "server", "db")
# The back end answers the agent through the wire contract, never with the agent's own code.
NOT_TO_AGENT = ("controlplane", "server", "service", "dashboard")


def _imports(path: Path, members: bool = False) -> list[tuple[int, str]]:
    """Every ``spothop`` module named by an import in ``path``, as written, with its line; with
    ``members``, also each ``a.b`` of ``from a import b`` (``b`` may be a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if members:
                found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(line, name) for line, name in found if name.startswith("spothop.")]


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _offences(root: Path = ROOT) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        top = rel.parts[0].removesuffix(".py")
        if top == "__init__":  # the package root re-exports the public surface
            continue
        for line, name in sorted(set(_imports(path))):
            target = name.split(".")[1]
            where = f"{rel}:{line} ({top}) imports {name}"
            if top in FLOOR and target in FLOOR and FLOOR[target] > FLOOR[top]:
                out.append(f"{where} (a layer above)")
            if top in ON_INSTANCE and target in ABOVE_INSTANCE:
                out.append(f"{where} (the instance reaching the back end)")
            if top == "agent" and target in NOT_FROM_AGENT:
                out.append(f"{where} (the agent talks to the back end only through controlplane/)")
            if top in NOT_TO_AGENT and target == "agent":
                out.append(f"{where} (the back end speaks to the agent through wire/)")
    return out


def _graph(root: Path) -> dict[str, set[str]]:
    """Module → the spothop modules it imports (``from a import b`` counts as ``a.b`` when b is a
    module, else as ``a``)."""
    modules = _modules(root)

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for _, name in _imports(path, members=True):
            target = resolve(name)
            if target and target != module and not module.startswith(f"{target}."):
                graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    yield sorted(component)


def test_every_package_imports_only_the_layers_below_it() -> None:
    assert not _offences(), "\n".join(_offences())


def test_every_package_has_a_floor() -> None:
    tops = {p.name.removesuffix(".py") for p in ROOT.iterdir() if p.suffix == ".py" or p.is_dir()}
    tops -= {"__init__", "__pycache__", "py.typed", *ON_INSTANCE}
    tops = {t for t in tops if (ROOT / t).is_dir() and (ROOT / t / "__init__.py").exists()} | {
        t for t in tops if (ROOT / f"{t}.py").exists()
    }
    assert tops <= set(FLOOR), f"packages without a floor: {sorted(tops - set(FLOOR))}"


def test_no_module_imports_itself_back() -> None:
    circles = list(_circles(_graph(ROOT)))
    assert not circles, "\n".join(" → ".join(c) for c in circles)


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from spothop.observe.ledger import close_books\n")
    assert _imports(sample) == [(2, "spothop.observe.ledger")]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "spothop"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_sees_an_arrow_up_and_the_agent_reaching_the_store(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "state/__init__.py": "import spothop.market\n",
            "agent/__init__.py": "def f():\n    import spothop.queue.sql_backend\n",
            "market/__init__.py": "import spothop.state\n",
        },
    )
    found = _offences(root)
    assert any(o.startswith("state/__init__.py:1 (state) imports spothop.market") for o in found)
    assert any("agent/__init__.py:2 (agent) imports spothop.queue" in o for o in found)
    assert not any(o.startswith("market/") for o in found)


def test_the_check_sees_a_circle_through_a_lazy_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "cli/__init__.py": "",
            "cli/plan.py": "from spothop.cli.views import plan\n",
            "cli/views.py": "def plan():\n    from spothop.cli.plan import _private\n",
            "cli/other.py": "from spothop.cli import views\n",
        },
    )
    assert list(_circles(_graph(root))) == [["spothop.cli.plan", "spothop.cli.views"]]
