"""Parse AMD's ``rocm-smi``: the default "Concise Info" table and the ``-a`` log.

Both open with a ``ROCm System Management Interface`` banner. The concise table
gives one device row (index, ``[Model : Revision]``, readings) followed by a
line with the marketing name; ``-a`` prints ``GPU[i] : key: value`` lines per
section (``Card series``, ``PCI Bus``), and the driver version once. Neither
prints VRAM size by default, so ``memory_total_mib`` stays ``None``.
"""

from __future__ import annotations

import re

from spothop.errors import TopologyParseError
from spothop.resources.topology._values import known_text
from spothop.resources.topology.model import GpuDevice, SourceFormat, Topology

ROCM_BANNER = "ROCm System Management Interface"
_CONCISE_ROW = re.compile(r"^(\d+)\s+\[0x[0-9a-fA-F]+\s*:\s*0x[0-9a-fA-F]+\]")
_LOG_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*(?P<key>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")
_DRIVER = re.compile(r"^Driver version:\s*(\S+)", re.MULTILINE)


def looks_like_rocm_smi(text: str) -> bool:
    return ROCM_BANNER in text[:1024]


def parse_rocm_smi(text: str) -> Topology:
    """Parse ``rocm-smi`` or ``rocm-smi -a``; raise :class:`TopologyParseError` naming the line."""
    lines = text.splitlines()
    gpus = _concise(lines) if "Concise Info" in text[:2048] else _log(lines)
    if not gpus:
        raise TopologyParseError(
            f"line {len(lines)}: expected GPU rows in `rocm-smi` output (a concise table or GPU[i] lines); found none"
        )
    driver = _DRIVER.search(text)
    return Topology(
        source_format=SourceFormat.ROCM_SMI,
        gpus=tuple(gpus),
        driver_version=driver.group(1) if driver else None,
    )


def _concise(lines: list[str]) -> list[GpuDevice]:
    gpus: list[GpuDevice] = []
    for at, line in enumerate(lines):
        row = _CONCISE_ROW.match(line)
        if not row:
            continue
        following = lines[at + 1] if at + 1 < len(lines) else ""
        name = following.strip()
        if not name or name.startswith("=") or _CONCISE_ROW.match(following):
            raise TopologyParseError(
                f"line {at + 2}: expected the device name under GPU {row.group(1)}"
            )
        gpus.append(GpuDevice(index=int(row.group(1)), name=name))
    return gpus


def _log(lines: list[str]) -> list[GpuDevice]:
    fields: dict[int, dict[str, str]] = {}
    for line in lines:
        entry = _LOG_LINE.match(line)
        if entry:
            fields.setdefault(int(entry.group(1)), {}).setdefault(
                entry.group("key"), entry.group("value")
            )
    return [
        GpuDevice(
            index=index,
            name=known_text(values.get("Card series")),
            pci_bus_id=known_text(values.get("PCI Bus")),
        )
        for index, values in sorted(fields.items())
    ]
