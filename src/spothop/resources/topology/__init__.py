"""GPU topology from ``nvidia-smi`` (and ``rocm-smi``) output, and which GPUs a job should take.

``parse_any(text)`` detects the format; ``cost_matrix`` and ``choose_gpus``
turn the paths between GPUs into a placement; ``topology_json`` is a topology with
its cost matrix, as ``spothop topo parse --json`` prints it. See ``cost.py`` for the cost model.
"""

from spothop.resources.topology.cost import (
    bandwidth_matrix_gbps,
    choose_gpus,
    cost_matrix,
    estimated_bandwidth_gbps,
    set_cost,
    topology_json,
)
from spothop.resources.topology.detect import SUPPORTED, parse_any, parse_file
from spothop.resources.topology.model import GpuDevice, Link, LinkKind, SourceFormat, Topology
from spothop.resources.topology.rocm_smi import parse_rocm_smi
from spothop.resources.topology.smi_text import parse_smi_query, parse_smi_table
from spothop.resources.topology.smi_xml import parse_smi_xml
from spothop.resources.topology.topo_matrix import parse_topo_matrix

__all__ = [
    "SUPPORTED",
    "GpuDevice",
    "Link",
    "LinkKind",
    "SourceFormat",
    "Topology",
    "bandwidth_matrix_gbps",
    "choose_gpus",
    "cost_matrix",
    "estimated_bandwidth_gbps",
    "parse_any",
    "parse_file",
    "parse_rocm_smi",
    "parse_smi_query",
    "parse_smi_table",
    "parse_smi_xml",
    "parse_topo_matrix",
    "set_cost",
    "topology_json",
]
