"""``spothop topo parse``: read nvidia-smi output, show the GPUs, their paths and what they cost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from spothop.cli.output import console, print_json, table
from spothop.errors import SpothopError
from spothop.resources.topology import (
    Topology,
    choose_gpus,
    cost_matrix,
    parse_file,
    set_cost,
    topology_json,
)

topo_app = typer.Typer(help="GPU topology from nvidia-smi output.", no_args_is_help=True)


@topo_app.command("parse")
def parse(
    file: Annotated[
        Path,
        typer.Argument(
            help="output of nvidia-smi topo -m, -q -x, -q/-a, the default table, or rocm-smi"
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print the topology as JSON")] = False,
    choose: Annotated[
        int | None,
        typer.Option("--choose", help="pick the K GPUs with the cheapest pairwise links"),
    ] = None,
) -> None:
    """Show the GPUs in FILE, the link matrix and the communication cost matrix."""
    topology = parse_file(file)
    chosen = choose_gpus(topology, choose) if choose is not None else None
    if as_json:
        print_json(topology_json(topology, chosen))
        return
    console.print(
        Text.assemble(
            (str(file), "bold"),
            f": {topology.source_format.value}, {topology.gpu_count} GPU(s){_versions(topology)}",
        )
    )
    console.print(_gpu_table(topology))
    if topology.links is None:
        console.print(
            Text(
                "This format carries no GPU-to-GPU paths; `nvidia-smi topo -m` has them.",
                style="dim",
            )
        )
    else:
        console.print(_link_table(topology))
        if topology.nics:
            console.print(_nic_table(topology))
        console.print(_cost_table(topology))
    if chosen is not None:
        total = set_cost(cost_matrix(topology), [_position(topology, i) for i in chosen])
        console.print(
            Text.assemble(
                f"chosen {len(chosen)} GPU(s): ",
                (", ".join(f"GPU{i}" for i in chosen), "bold"),
                f" (total pairwise cost {total:.2f})",
            )
        )
        if topology.links is None:
            console.print(
                Text(
                    "No paths in this output, so every pair costs the same: the lowest indices win.",
                    style="dim",
                )
            )
    for note in topology.notes:
        console.print(Text.assemble(("note: ", "yellow"), note))


def _versions(topology: Topology) -> str:
    parts = [
        f"driver {topology.driver_version}" if topology.driver_version else "",
        f"CUDA {topology.cuda_version}" if topology.cuda_version else "",
    ]
    shown = ", ".join(p for p in parts if p)
    return f" ({shown})" if shown else ""


def _canonical(name: str | None, memory_mib: int | None) -> str | None:
    if name is None:
        return None
    try:
        from spothop.resources.gpus import resolve_gpu

        return resolve_gpu(name, None if memory_mib is None else memory_mib / 1024).name
    except (SpothopError, OSError, KeyError):  # an unknown name, or the GPU table not installed
        return None


def _gpu_table(topology: Topology) -> Any:
    rows = []
    for g in topology.gpus:
        gen = (
            f"{g.pcie_gen_current or '?'}/{g.pcie_gen_max or '?'}"
            if g.pcie_gen_current or g.pcie_gen_max
            else None
        )
        width = (
            f"x{g.pcie_link_width_current or '?'}/x{g.pcie_link_width_max or '?'}"
            if g.pcie_link_width_current or g.pcie_link_width_max
            else None
        )
        memory = None if g.memory_total_gib is None else f"{g.memory_total_gib:.1f}"
        rows.append(
            [
                f"GPU{g.index}",
                g.name,
                _canonical(g.name, g.memory_total_mib),
                memory,
                gen,
                width,
                g.pci_bus_id,
                g.cpu_affinity,
                g.numa_affinity,
            ]
        )
    columns = [
        "GPU",
        "name",
        "model",
        "GiB",
        "PCIe gen now/max",
        "width now/max",
        "bus id",
        "CPU affinity",
        "NUMA",
    ]
    # Each format fills different columns; show only those this output filled.
    keep = [c for c in range(len(columns)) if c == 0 or any(row[c] is not None for row in rows)]
    return table(
        "GPUs", [columns[c] for c in keep], [[row[c] for c in keep] for row in rows], right=["GiB"]
    )


def _link_table(topology: Topology) -> Any:
    names = [f"GPU{g.index}" for g in topology.gpus]
    rows = []
    for i, name in enumerate(names):
        links = [topology.link(i, j) for j in range(len(names))]
        rows.append([name, *(None if link is None else link.label for link in links)])
    return table("GPU links (— not reported)", ["", *names], rows)


def _nic_table(topology: Topology) -> Any:
    names = [f"GPU{g.index}" for g in topology.gpus]
    rows = [
        [name, *(None if link is None else link.label for link in row)]
        for name, row in zip(names, topology.gpu_nic_links, strict=True)
    ]
    return table("GPU to NIC links", ["", *topology.nics], rows)


def _cost_table(topology: Topology) -> Any:
    names = [f"GPU{g.index}" for g in topology.gpus]
    costs = cost_matrix(topology)
    rows = [[name, *(f"{c:.2f}" for c in row)] for name, row in zip(names, costs, strict=True)]
    return table(
        "communication cost (best pair = 1.00; see docs/probe.md)", ["", *names], rows, right=names
    )


def _position(topology: Topology, index: int) -> int:
    return next(p for p, g in enumerate(topology.gpus) if g.index == index)


def register(app: typer.Typer) -> None:
    app.add_typer(topo_app, name="topo")
