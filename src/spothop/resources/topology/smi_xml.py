"""Parse ``nvidia-smi -q -x``: the XML log (DTD ``nvsmi_device_v10`` to ``v12`` and later).

Every element is optional in practice: old drivers and trimmed logs (Telegraf's
fixtures) leave out the driver version, the bus id or the PCIe maxima. A value
of ``N/A`` or a missing element becomes ``None``. The XML carries no GPU-to-GPU
paths and, in the schema versions seen so far, no NVLink list (only the NVSwitch
``<fabric><state>``), so the topology's ``links`` is ``None`` unless every GPU joined the
NVSwitch fabric (see :mod:`~spothop.resources.topology.fabric`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from spothop.errors import TopologyParseError
from spothop.resources.topology._values import known_text, leading_int
from spothop.resources.topology.fabric import with_fabric_links
from spothop.resources.topology.model import GpuDevice, SourceFormat, Topology

ROOT_TAG = "nvidia_smi_log"


def looks_like_smi_xml(text: str) -> bool:
    head = text.lstrip()[:4096]
    return head.startswith("<?xml") or f"<{ROOT_TAG}" in head


def parse_smi_xml(text: str) -> Topology:
    """Parse ``nvidia-smi -q -x`` output; raise :class:`TopologyParseError` naming the line."""
    try:
        # The DOCTYPE names an external DTD; ElementTree never fetches it, and the
        # expat it uses caps entity expansion, so a hostile file cannot balloon.
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        raise TopologyParseError(
            f"line {line}, column {column}: expected well-formed `nvidia-smi -q -x` XML ({exc.msg})"
        ) from None
    if root.tag != ROOT_TAG:
        raise TopologyParseError(f"line 1: expected a <{ROOT_TAG}> root element; got <{root.tag}>")
    gpus = tuple(_gpu(index, el) for index, el in enumerate(root.findall("gpu")))
    if not gpus:
        raise TopologyParseError(f"expected at least one <gpu> element in <{ROOT_TAG}>; found none")
    notes: list[str] = []
    attached = leading_int(root.findtext("attached_gpus"))
    if attached is not None and attached != len(gpus):
        notes.append(f"attached_gpus says {attached} but the log describes {len(gpus)}")
    return with_fabric_links(
        Topology(
            source_format=SourceFormat.SMI_XML,
            gpus=gpus,
            driver_version=known_text(root.findtext("driver_version")),
            cuda_version=known_text(root.findtext("cuda_version")),
            notes=tuple(notes),
        )
    )


def _gpu(index: int, el: ET.Element) -> GpuDevice:
    link = "pci/pci_gpu_link_info"
    return GpuDevice(
        index=index,
        name=known_text(el.findtext("product_name")),
        uuid=known_text(el.findtext("uuid")),
        pci_bus_id=known_text(el.findtext("pci/pci_bus_id")) or known_text(el.get("id")),
        # The GPU's own framebuffer total; MIG devices nest their own fb_memory_usage deeper.
        memory_total_mib=leading_int(el.findtext("fb_memory_usage/total")),
        pcie_gen_current=leading_int(el.findtext(f"{link}/pcie_gen/current_link_gen")),
        pcie_gen_max=leading_int(el.findtext(f"{link}/pcie_gen/max_link_gen")),
        pcie_link_width_current=leading_int(el.findtext(f"{link}/link_widths/current_link_width")),
        pcie_link_width_max=leading_int(el.findtext(f"{link}/link_widths/max_link_width")),
        fabric_state=known_text(el.findtext("fabric/state")),
    )
