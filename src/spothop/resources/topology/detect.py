"""Tell which tool printed a text and hand it to the matching parser.

Detection looks only at the first lines (banners, the XML prolog, a matrix
header), so a file is never half-parsed by the wrong reader. Outputs spothop
knows but does not read (CUDA ``deviceQuery``, ``rocminfo``) get an error
that says what to run instead.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from spothop.errors import NotFoundError, TopologyParseError
from spothop.resources.topology.model import Topology
from spothop.resources.topology.rocm_smi import looks_like_rocm_smi, parse_rocm_smi
from spothop.resources.topology.smi_text import (
    looks_like_smi_query,
    looks_like_smi_table,
    parse_smi_query,
    parse_smi_table,
)
from spothop.resources.topology.smi_xml import looks_like_smi_xml, parse_smi_xml
from spothop.resources.topology.topo_matrix import looks_like_topo_matrix, parse_topo_matrix

SUPPORTED = (
    "`nvidia-smi topo -m`, `nvidia-smi -q -x`, `nvidia-smi -q` (or -a), "
    "the default `nvidia-smi` table, `rocm-smi` and `rocm-smi -a`"
)

_READERS: tuple[tuple[Callable[[str], bool], Callable[[str], Topology]], ...] = (
    (looks_like_smi_xml, parse_smi_xml),
    (looks_like_smi_query, parse_smi_query),
    (looks_like_smi_table, parse_smi_table),
    (looks_like_rocm_smi, parse_rocm_smi),
    (looks_like_topo_matrix, parse_topo_matrix),
)

# Known outputs that are not topology sources: marker -> what the user should run instead.
_UNSUPPORTED = (
    ("CUDA Device Query", "CUDA deviceQuery output"),
    ("deviceQuery Starting", "CUDA deviceQuery output"),
    ("hipSetDevice", "HIP deviceQuery output"),
    ("HSA System Attributes", "rocminfo output"),
)


def parse_any(text: str) -> Topology:
    """Parse any supported format; raise :class:`TopologyParseError` for anything else."""
    for looks_like, parse in _READERS:
        if looks_like(text):
            try:
                return parse(text)
            except ValidationError as exc:  # the rows parsed, but do not make one machine
                problem = exc.errors()[0]
                where = ".".join(map(str, problem["loc"])) or "the GPUs"
                raise TopologyParseError(
                    f"the output describes an inconsistent machine ({where}: {problem['msg']})"
                ) from None
    head = text[:4096]
    for marker, what in _UNSUPPORTED:
        if marker in head:
            raise TopologyParseError(
                f"unsupported format: this is {what}; spothop reads {SUPPORTED}"
            )
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    raise TopologyParseError(
        f"line 1: expected output of {SUPPORTED}; got {first[:60]!r}"
        if first
        else "the input is empty"
    )


def parse_file(path: str | Path) -> Topology:
    """Read and parse a file; a missing one is a :class:`NotFoundError`, an unreadable one a
    :class:`TopologyParseError`, each naming the path."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise NotFoundError(
            f"{path}: no such file; give the saved output of `nvidia-smi topo -m` (or -q -x, -a)"
        ) from None
    except OSError as exc:
        raise TopologyParseError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return parse_any(text)
    except TopologyParseError as exc:
        raise TopologyParseError(f"{path}: {exc}") from None
