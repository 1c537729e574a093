"""Generic code never names a cloud: what differs between clouds lives in that cloud's own folder.

**Where a cloud may be named** (``EXEMPT``): ``providers/<cloud>/`` (every
provider folder but ``local``, whose generic parts are scanned),
``providers/local/metadata/`` (the imitated clouds' protocols),
``agent/notices/`` (one notice watcher per cloud), ``market/sources/`` and
``resources/sources/`` (one reader per file format: a format may treat one
cloud's rows apart, as SkyPilot's GCP accelerator rows), and data files (only ``*.py`` is scanned). Every
other ``src/spothop/**/*.py`` is generic code.

**What counts as naming a cloud**, read with :mod:`tokenize`:

- an **identifier** containing a cloud name as a word: ``aws_region_of_zone``,
  ``AzureWatcher`` and ``GCP`` count (words are split at ``_``, digits and
  camelCase humps); ``claws`` and ``lambdas`` do not; the keyword ``lambda``
  is Python, not the cloud;
- a **string literal** containing a cloud name as a word — including f-strings,
  help text and error messages: a string is behaviour (compared, keyed,
  printed), and an example in help text goes stale when the cloud's folder
  changes, so help text takes its examples from a registry.

**What does not count**: comments and docstrings (any string that is a whole
expression statement: module, class, function and attribute docstrings). They
are documentation; an example there (``MarketId("aws", ...)``) explains and
decides nothing.

``ALLOWED`` lists the offenders that remain while other parts move; each entry
says what must move where. The second test fails when an entry no longer
offends, so the list only ever shrinks.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "spothop"

CLOUD_NAMES = frozenset(
    {
        "aws",
        "amazon",
        "ec2",
        "gcp",
        "gce",
        "gcloud",
        "google",
        "azure",
        "microsoft",
        "aliyun",
        "alibaba",
        "alibabacloud",
        "tencent",
        "tencentcloud",
        "qcloud",
        "volcengine",
        "byteplus",
        "lambda",
        "lambdalabs",  # Lambda (the cloud); the keyword is skipped
        "runpod",
        "vast",
        "vastai",
        "coreweave",
        "paperspace",
        "fluidstack",
        "nebius",
        "scaleway",
        "cudo",
        "oci",
        "oracle",
        "ibm",
        "digitalocean",
        "hyperstack",
    }
)

# Folders (relative to src/spothop) where naming a cloud is the point.
EXEMPT = ("providers/local/metadata/", "agent/notices/", "market/sources/", "resources/sources/")

# path → the cloud names it may still contain, until what the comment names has moved.
ALLOWED: dict[str, frozenset[str]] = {}

_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def words(text: str) -> set[str]:
    """The lower-case words of an identifier or a string: split at non-letters and camelCase humps.

    Each whole alphanumeric run counts as a word too, so ``TencentCloud`` yields
    ``tencent``, ``cloud`` and ``tencentcloud``.
    """
    found: set[str] = set()
    for run in re.split(r"[^A-Za-z0-9]+", text):
        if run:
            found.add(run.lower())
            found.update(w.lower() for w in _CAMEL.findall(run))
            found.update(w.lower() for w in re.split(r"\d+", run) if w)
    return found


def exempt(relative: str) -> bool:
    """Whether a path under src/spothop may name clouds (see the module docstring)."""
    parts = relative.split("/")
    if len(parts) > 2 and parts[0] == "providers" and parts[1] != "local":
        return True
    return relative.startswith(EXEMPT)


def _documentation(source: str) -> set[tuple[int, int]]:
    """Where every string expression statement (a docstring) starts."""
    return {
        (node.lineno, node.col_offset)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def cloud_names_in(source: str) -> Iterator[tuple[int, str]]:
    """(line, cloud name) for each identifier or string literal of ``source`` that names a cloud."""
    docs = _documentation(source)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME:
            if token.string == "lambda":
                continue
        elif token.type != tokenize.STRING or token.start in docs:
            continue  # comments, docstrings, operators, numbers
        for name in sorted(words(token.string) & CLOUD_NAMES):
            yield token.start[0], name


@cache  # the tree does not change during a run: both tests below read one scan of it
def offenders(root: Path = SRC) -> dict[str, dict[str, list[int]]]:
    """path → cloud name → lines, for every generic file under ``root`` that names a cloud."""
    found: dict[str, dict[str, list[int]]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if exempt(relative):
            continue
        for line, name in cloud_names_in(path.read_text(encoding="utf-8")):
            found.setdefault(relative, {}).setdefault(name, []).append(line)
    return found


def test_generic_code_names_no_cloud() -> None:
    unexpected = [
        f"src/spothop/{path}:{lines[0]}: names {name!r}"
        for path, names in offenders().items()
        for name, lines in names.items()
        if name not in ALLOWED.get(path, frozenset())
    ]
    assert not unexpected, (
        "generic code names a cloud; move what differs into providers/<cloud>/, providers/local/metadata/, "
        "agent/notices/ or market/sources/, or generate it from a registry:\n"
        + "\n".join(unexpected)
    )


def test_every_allowed_offender_still_offends() -> None:
    found = offenders()
    stale = [
        f"{path}: {name}"
        for path, names in ALLOWED.items()
        for name in sorted(names)
        if name not in found.get(path, {})
    ]
    assert not stale, "these ALLOWED entries no longer name the cloud; remove them:\n" + "\n".join(
        stale
    )


def test_nothing_in_the_market_area_is_allowed() -> None:
    assert not [
        path
        for path in ALLOWED
        if path.startswith(("market/", "cli/market.py", "resources/market_id.py"))
    ]


SAMPLE = '''"""Module docstring: MarketId("aws", ...) is an example."""
import lambda_calculus  # a comment about azure
def f(region):
    """Docstring naming gcp."""
    key = lambda zone: zone  # the keyword
    AzureWatcher = 1
    claws = "claws and lambdas are words, not clouds"
    g = f"{region}-aws-sim"
    note = "ok"
    """an attribute docstring naming tencent"""
    return ("TencentCloud", aliyun_zone)
'''


def test_the_scanner_counts_identifiers_and_strings_but_not_documentation() -> None:
    assert sorted(set(cloud_names_in(SAMPLE))) == [
        (2, "lambda"),
        (6, "azure"),
        (8, "aws"),
        (11, "aliyun"),
        (11, "tencent"),
        (11, "tencentcloud"),
    ]


@pytest.mark.parametrize(
    ("relative", "is_exempt"),
    [
        ("providers/aws/adapter.py", True),
        ("providers/local/metadata/aws.py", True),
        ("providers/local/provider.py", False),
        ("providers/registry.py", False),
        ("agent/notices/gcp.py", True),
        ("agent/runtime.py", False),
        ("market/sources/aws.py", True),
        ("market/price_store.py", False),
    ],
)
def test_only_the_clouds_own_folders_are_exempt(relative: str, is_exempt: bool) -> None:
    assert exempt(relative) is is_exempt
