"""The package root: a curated API, imported lazily, with the whole error tree and ``@spothop.batch``."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import spothop
from spothop.errors import SpothopError

HEAVY = ("pydantic", "sqlalchemy", "numpy", "torch")
CURATED = (
    "Checkpointer",
    "TorchState",
    "open_queue",
    "get_provider",
    "load_catalog",
    "batch",
    "stop_requested",
    "on_stop",
    "seconds_left",
    "heartbeat",
    "checkpoint_requested",
    "saved",
)


def _fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_spothop_loads_nothing_heavy() -> None:
    loaded = _fresh(
        "import sys, spothop\n"
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    assert loaded == ""


def test_every_listed_name_resolves_and_dir_lists_it() -> None:
    listed = set(dir(spothop))
    for name in spothop.__all__:
        assert getattr(spothop, name) is not None
        assert name in listed
    assert set(CURATED) <= set(spothop.__all__)
    assert spothop.open_queue is importlib.import_module("spothop.queue").open_queue
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = spothop.nothing_here  # type: ignore[attr-defined]


def _public_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(spothop.__path__, "spothop."):
        parts = info.name.split(".")
        # Private modules, entry points and the command line are not the library's surface.
        if (
            any(p.startswith("_") for p in parts)
            or parts[1] in ("cli",)
            or parts[-1] in ("host", "chaos")
        ):
            continue
        names.append(info.name)
    return names


def _tree(root: type) -> set[type]:
    found = {root}
    for sub in root.__subclasses__():
        found |= _tree(sub)
    return found


def test_the_whole_error_tree_is_exported_from_the_root() -> None:
    for name in _public_modules():
        importlib.import_module(name)
    errors = {
        c
        for c in _tree(SpothopError)
        if c.__module__.startswith("spothop.")
        and not any(p.startswith("_") for p in c.__module__.split("."))
    }
    missing = sorted(
        f"{c.__module__}.{c.__name__}"
        for c in errors
        if getattr(spothop, c.__name__, None) is not c
    )
    assert not missing, (
        "add these errors to spothop/__init__.py (_LAZY, or the spothop.errors import):\n"
        + "\n".join(missing)
    )
    assert {c.__name__ for c in errors} <= set(spothop.__all__)


@pytest.mark.parametrize(
    "first", ["import spothop.batch.runner", "from spothop.batch import submit", "import spothop"]
)
def test_spothop_batch_is_the_decorator_whatever_was_imported_first(first: str) -> None:
    out = _fresh(
        f"{first}\n"
        "import spothop\n"
        "from spothop.batch import BatchFunction, load_spec, run_worker, submit\n"
        "@spothop.batch\n"
        "def process(shard):\n"
        "    return shard\n"
        "print(isinstance(process, BatchFunction), process('x'), callable(submit))"
    )
    assert out == "True x True"


def test_the_batch_package_names_resolve_lazily() -> None:
    batch_package = sys.modules["spothop.batch"]
    for name in batch_package.__all__:
        assert getattr(batch_package, name) is not None
    with pytest.raises(AttributeError, match=r"'spothop\.batch' has no attribute"):
        _ = batch_package.nothing_here
