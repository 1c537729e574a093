"""Parse ``nvidia-smi topo -m``: the GPU/NIC connection matrix, affinities and legend.

The output is a header row of column names, one row per device, then an
optional legend::

            GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
    GPU0     X      NV12    PXB     48-63,176-191   3               N/A
    ...
    Legend:
      X    = Self
      NV#  = Connection traversing a bonded set of # NVLinks
    NIC Legend:
      NIC0: mlx5_0

Columns are separated by tabs or runs of spaces depending on the driver; NIC
rows stop after the device columns (no affinity). A matrix may hold rows for
only some GPUs (output cut short); the missing links are taken from the
transposed cell where there is one, else left unknown and noted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from spothop.errors import TopologyParseError
from spothop.resources.topology.model import (
    SELF_LINK,
    GpuDevice,
    Link,
    LinkKind,
    LinkMatrix,
    SourceFormat,
    Topology,
)

# The columns after the device columns; the header spells them with spaces.
CPU_AFFINITY = "CPU Affinity"
NUMA_AFFINITY = "NUMA Affinity"
GPU_NUMA_ID = "GPU NUMA ID"
_AFFINITY_COLUMNS = (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_NAME = re.compile(r"^GPU(\d+)$")
_CELL = re.compile(r"^(?:(X)|NV(\d+)|(PIX|PXB|PHB|NODE|SYS|SOC))$")
_LEGEND_ENTRY = re.compile(r"^\s*(\S+)\s*=\s*(.+?)\s*$")
_NIC_LEGEND_ENTRY = re.compile(r"^\s*(\S+):\s*(\S+)\s*$")
_EXPECTED_CELL = "X, NV<count>, PIX, PXB, PHB, NODE or SYS"


def looks_like_topo_matrix(text: str) -> bool:
    """True when the first non-blank line is a header naming GPU0 (a header has no ``X`` cell)."""
    for line in _strip_ansi(text).splitlines():
        if line.strip():
            tokens = line.split()
            return "GPU0" in tokens and "X" not in tokens
    return False


@dataclass
class _Row:
    line_no: int
    cells: list[str]
    extras: list[str] = field(default_factory=list)


def parse_topo_matrix(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` output; raise :class:`TopologyParseError` naming the line."""
    lines = _strip_ansi(text).splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise TopologyParseError(
            "line 1: expected the `nvidia-smi topo -m` header row; the input is empty"
        )
    devices, affinity_cols = _parse_header(lines[header_at], header_at + 1)
    rows, end = _parse_rows(lines, header_at + 1, devices, affinity_cols)
    legend = _parse_legend(lines[end:])
    return _build(devices, affinity_cols, rows, legend)


def _strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _parse_header(line: str, line_no: int) -> tuple[list[str], list[str]]:
    """Split the header into device columns and the affinity columns after them."""
    affinity: list[tuple[int, str]] = []
    rest = line
    for name in _AFFINITY_COLUMNS:
        at = rest.find(name)
        if at >= 0:
            affinity.append((at, name))
            # Blank it out with spaces so the other columns keep their positions.
            rest = rest[:at] + " " * len(name) + rest[at + len(name) :]
    devices = rest.split()
    if "GPU0" not in devices:
        raise TopologyParseError(
            f"line {line_no}: expected a `nvidia-smi topo -m` header naming GPU0, GPU1, ...; got {line.strip()[:60]!r}"
        )
    first_affinity = min((at for at, _ in affinity), default=len(line))
    if any(rest.find(d) > first_affinity for d in devices):
        raise TopologyParseError(
            f"line {line_no}: device columns must come before {CPU_AFFINITY!r}"
        )
    return devices, [name for _, name in sorted(affinity)]


def _parse_rows(
    lines: list[str], start: int, devices: list[str], affinity_cols: list[str]
) -> tuple[dict[str, _Row], int]:
    """Read device rows until the first blank line; return them and where the legend starts."""
    rows: dict[str, _Row] = {}
    at = start
    while at < len(lines) and lines[at].strip():
        line_no = at + 1
        tokens = lines[at].split()
        name, values = tokens[0], tokens[1:]
        if name == "Legend:":
            break
        if name not in devices:
            raise TopologyParseError(
                f"line {line_no}: expected a row for one of {', '.join(devices)}; got {name!r}"
            )
        if name in rows:
            raise TopologyParseError(
                f"line {line_no}: second row for {name} (first on line {rows[name].line_no})"
            )
        if len(values) < len(devices):
            raise TopologyParseError(
                f"line {line_no}: row {name} has {len(values)} cells, expected {len(devices)} "
                f"(one per column {devices[0]}..{devices[-1]})"
            )
        extras = values[len(devices) :]
        if len(extras) > len(affinity_cols):
            raise TopologyParseError(
                f"line {line_no}: row {name} has {len(extras)} values after the device columns, "
                f"expected at most {len(affinity_cols)} ({', '.join(affinity_cols) or 'none'})"
            )
        rows[name] = _Row(line_no, values[: len(devices)], extras)
        at += 1
    if not rows:
        raise TopologyParseError(
            f"line {start + 1}: expected at least one device row after the header"
        )
    return rows, at


def _parse_cell(cell: str, line_no: int, row: str, column: str) -> Link:
    match = _CELL.match(cell)
    if match is None:
        raise TopologyParseError(
            f"line {line_no}: row {row}, column {column}: expected {_EXPECTED_CELL}; got {cell!r}"
        )
    self_mark, nv_count, kind = match.groups()
    if self_mark:
        return SELF_LINK
    if nv_count is not None:
        return Link(kind=LinkKind.NV, nvlink_count=int(nv_count))
    # SOC is what drivers before ~384 printed for SYS.
    return Link(kind=LinkKind.SYS if kind == "SOC" else LinkKind(kind))


def _parse_legend(lines: list[str]) -> dict[str, str]:
    legend: dict[str, str] = {}
    section = ""
    for line in lines:
        stripped = line.strip()
        if stripped.endswith("Legend:"):
            section = stripped
            continue
        entry = _LEGEND_ENTRY.match(line) if section == "Legend:" else _NIC_LEGEND_ENTRY.match(line)
        if section and entry:
            legend[entry.group(1)] = entry.group(2)
    return legend


def _build(
    devices: list[str], affinity_cols: list[str], rows: dict[str, _Row], legend: dict[str, str]
) -> Topology:
    gpu_cols = [d for d in devices if _GPU_NAME.match(d)]
    nic_cols = [d for d in devices if not _GPU_NAME.match(d)]
    cells = {name: _parse_row_cells(name, row, devices) for name, row in rows.items()}
    notes: list[str] = []

    def cell(a: str, b: str) -> Link | None:
        # A missing row is filled from the transposed cell: the matrix is symmetric.
        if a == b:
            return SELF_LINK
        if a in cells:
            return cells[a][b]
        return cells[b][a] if b in cells else None

    links: LinkMatrix = tuple(tuple(cell(a, b) for b in gpu_cols) for a in gpu_cols)
    nic_links: LinkMatrix = tuple(tuple(cell(a, b) for b in nic_cols) for a in gpu_cols)
    missing = [g for g in gpu_cols if g not in rows]
    if missing:
        notes.append(
            f"no rows for {', '.join(missing)} (output cut short?): links among them are unknown "
            "and their CPU/NUMA affinity is not known"
        )
    gpus = tuple(_gpu(name, rows.get(name), affinity_cols) for name in gpu_cols)
    return Topology(
        source_format=SourceFormat.TOPO_MATRIX,
        gpus=gpus,
        links=links,
        nics=tuple(nic_cols),
        gpu_nic_links=nic_links if nic_cols else (),
        legend=legend,
        notes=tuple(notes),
    )


def _parse_row_cells(name: str, row: _Row, devices: list[str]) -> dict[str, Link]:
    parsed = {
        col: _parse_cell(c, row.line_no, name, col)
        for col, c in zip(devices, row.cells, strict=True)
    }
    if parsed[name] != SELF_LINK:
        raise TopologyParseError(
            f"line {row.line_no}: row {name}, column {name}: expected X (self); got {parsed[name].label}"
        )
    for col, link in parsed.items():
        if col != name and link == SELF_LINK:
            raise TopologyParseError(
                f"line {row.line_no}: row {name}, column {col}: X is only for a device's own column"
            )
    return parsed


def _gpu(name: str, row: _Row | None, affinity_cols: list[str]) -> GpuDevice:
    match = _GPU_NAME.match(name)
    assert match is not None  # only GPU columns reach here
    values = dict(zip(affinity_cols, row.extras, strict=False)) if row else {}
    return GpuDevice(
        index=int(match.group(1)),
        cpu_affinity=_known(values.get(CPU_AFFINITY)),
        numa_affinity=_known(values.get(NUMA_AFFINITY)),
    )


def _known(value: str | None) -> str | None:
    return None if value in (None, "", "N/A") else value
