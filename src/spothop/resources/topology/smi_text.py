"""Parse the text forms of ``nvidia-smi``: the ``-q``/``-a`` log and the default table.

``nvidia-smi -q`` (``-a`` is the same) prints a ``==NVSMI LOG==`` banner, a few
``Key : value`` lines (driver, CUDA, attached GPUs), then one block per GPU
opened by ``GPU <bus id>`` at the left margin. Inside a block, sections nest by
four-space indentation (``PCI`` > ``GPU Link Info`` > ``PCIe Generation`` >
``Max``), which is why lines are read into paths rather than matched one by one:
"Max : 16x" means link width only under ``Link Width``.

The default ``nvidia-smi`` table has one three-line box per GPU; the first line
holds index, name, persistence mode and bus id, the second the memory
"used / total". Long names are cut with ``...`` by nvidia-smi itself.
"""

from __future__ import annotations

import re

from spothop.errors import TopologyParseError
from spothop.resources.topology._values import known_text, leading_int
from spothop.resources.topology.fabric import with_fabric_links
from spothop.resources.topology.model import GpuDevice, SourceFormat, Topology

QUERY_BANNER = "NVSMI LOG"
TABLE_BANNER = "NVIDIA-SMI"
_INDENT = 4  # nvidia-smi -q nests sections by four spaces
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_GPU_BLOCK = re.compile(rf"^GPU ({_BUS_ID})\s*$")
_KEY_VALUE = re.compile(r"^(?P<indent> *)(?P<key>\S.*?)\s+: ?(?P<value>.*?)\s*$")
_TABLE_GPU = re.compile(rf"^\|\s+(\d+)\s+(.+?)\s+(\S+)\s+\|\s+({_BUS_ID})\s+\S+\s+\|")
_TABLE_MEMORY = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_TABLE_DRIVER = re.compile(r"Driver Version:\s*(\S+)")
_TABLE_CUDA = re.compile(r"CUDA Version:\s*(\S+)")

Path = tuple[str, ...]


def looks_like_smi_query(text: str) -> bool:
    return QUERY_BANNER in text[:2048]


def looks_like_smi_table(text: str) -> bool:
    return TABLE_BANNER in text[:4096] and "Bus-Id" in text[:4096]


# -- nvidia-smi -q / -a --------------------------------------------------------


def parse_smi_query(text: str) -> Topology:
    """Parse ``nvidia-smi -q`` / ``-a`` text; raise :class:`TopologyParseError` naming the line."""
    lines = text.splitlines()
    header: dict[str, str] = {}
    blocks: list[tuple[int, str, dict[Path, str]]] = []
    at = 0
    while at < len(lines):
        block = _GPU_BLOCK.match(lines[at])
        if block:
            fields, at = _read_block(lines, at + 1)
            blocks.append((at, block.group(1), fields))
            continue
        kv = _KEY_VALUE.match(lines[at])
        if kv and not kv.group("indent"):
            header.setdefault(kv.group("key"), kv.group("value"))
        at += 1
    if not blocks:
        raise TopologyParseError(
            f"line {len(lines)}: expected at least one 'GPU <bus id>' block in `nvidia-smi -q` output; found none"
        )
    gpus = tuple(_query_gpu(i, bus, fields, end) for i, (end, bus, fields) in enumerate(blocks))
    notes = _count_note(header.get("Attached GPUs"), len(gpus))
    return with_fabric_links(
        Topology(
            source_format=SourceFormat.SMI_QUERY_TEXT,
            gpus=gpus,
            driver_version=known_text(header.get("Driver Version")),
            cuda_version=known_text(header.get("CUDA Version")),
            notes=notes,
        )
    )


def _read_block(lines: list[str], at: int) -> tuple[dict[Path, str], int]:
    """Read one indented GPU block into {section path: value}; stop at the left margin."""
    fields: dict[Path, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, section name)
    while at < len(lines):
        line = lines[at].rstrip()
        if line and not line[0].isspace():
            break
        if line:
            indent = len(line) - len(line.lstrip(" "))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            kv = _KEY_VALUE.match(line)
            path = tuple(name for _, name in stack)
            if kv:
                fields.setdefault((*path, kv.group("key")), kv.group("value"))
            else:
                stack.append((indent, line.strip()))
        at += 1
    return fields, at


def _query_gpu(index: int, bus_id: str, fields: dict[Path, str], end_line: int) -> GpuDevice:
    name = known_text(fields.get(("Product Name",)))
    if name is None:
        raise TopologyParseError(
            f"line {end_line}: the block for GPU {bus_id} ends without a 'Product Name : ...' line"
        )
    gen = ("PCI", "GPU Link Info", "PCIe Generation")
    width = ("PCI", "GPU Link Info", "Link Width")
    return GpuDevice(
        index=index,
        name=name,
        uuid=known_text(fields.get(("GPU UUID",))),
        pci_bus_id=known_text(fields.get(("PCI", "Bus Id"))) or bus_id,
        memory_total_mib=leading_int(fields.get(("FB Memory Usage", "Total"))),
        pcie_gen_current=leading_int(fields.get((*gen, "Current"))),
        pcie_gen_max=leading_int(fields.get((*gen, "Max"))),
        pcie_link_width_current=leading_int(fields.get((*width, "Current"))),
        pcie_link_width_max=leading_int(fields.get((*width, "Max"))),
        fabric_state=known_text(fields.get(("Fabric", "State"))),
    )


# -- the default nvidia-smi table ------------------------------------------------


def parse_smi_table(text: str) -> Topology:
    """Parse the default ``nvidia-smi`` table; raise :class:`TopologyParseError` naming the line."""
    lines = text.splitlines()
    gpus: list[GpuDevice] = []
    notes: list[str] = []
    for at, line in enumerate(lines):
        row = _TABLE_GPU.match(line)
        if not row:
            continue
        memory = _TABLE_MEMORY.search(lines[at + 1]) if at + 1 < len(lines) else None
        if memory is None:
            raise TopologyParseError(
                f"line {at + 2}: expected the memory 'used MiB / total MiB' line under GPU {row.group(1)}"
            )
        name = row.group(2).strip()
        if name.endswith("..."):
            notes.append(
                f"GPU {row.group(1)}: nvidia-smi cut the name to {name!r}; `nvidia-smi -q` has it whole"
            )
        gpus.append(
            GpuDevice(
                index=int(row.group(1)),
                name=name,
                pci_bus_id=row.group(4),
                memory_total_mib=int(memory.group(2)),
            )
        )
    if not gpus:
        raise TopologyParseError(
            f"line {len(lines)}: expected GPU rows ('|   0  <name>  On  |   <bus id> ...') in the nvidia-smi table; found none"
        )
    head = "\n".join(lines[:5])
    driver, cuda = _TABLE_DRIVER.search(head), _TABLE_CUDA.search(head)
    return Topology(
        source_format=SourceFormat.SMI_TABLE,
        gpus=tuple(gpus),
        driver_version=driver.group(1) if driver else None,
        cuda_version=cuda.group(1) if cuda else None,
        notes=tuple(notes),
    )


def _count_note(attached: str | None, found: int) -> tuple[str, ...]:
    count = leading_int(attached)
    if count is None or count == found:
        return ()
    return (f"'Attached GPUs' says {count} but the log describes {found}",)
