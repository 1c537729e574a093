"""The body of a Compute Engine ``instances.insert``: what one launch asks for.

The metadata items spothop reads back (:data:`TAGS_ITEM`, :data:`PRICE_ITEM`, :data:`TYPE_ITEM`)
beside the startup script, and the boot disk from the job's ``disk`` and machine image.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spothop.providers.base import DiskTier, LaunchRequest
from spothop.providers.gcp import offerings as parse
from spothop.providers.gcp import sdk
from spothop.providers.gcp.userdata import render_startup_script
from spothop.providers.records import number_text

TAGS_ITEM = "spothop-tags"
PRICE_ITEM = "spothop-price-usd-per-hour"
TYPE_ITEM = "spothop-instance-type"
STARTUP_ITEM = "startup-script"
BOOT_DISK_GB = 100
# SkyPilot's disk tiers as Compute Engine disk types (best: the fastest, as ultra).
DISK_TYPES: Mapping[DiskTier, str] = {
    DiskTier.LOW: "pd-standard",
    DiskTier.MEDIUM: "pd-balanced",
    DiskTier.HIGH: "pd-ssd",
    DiskTier.ULTRA: "pd-extreme",
    DiskTier.BEST: "pd-extreme",
}


def boot_disk(request: LaunchRequest, zone: str, image: str) -> dict[str, Any]:
    """The boot disk's ``initialize_params``: the request's machine image, else ``image``; its
    ``disk`` size (else :data:`BOOT_DISK_GB`) and the tier's disk type (else the default)."""
    disk = request.disk
    params: dict[str, Any] = {
        "source_image": request.image_id or image,
        "disk_size_gb": disk.size_gib if disk and disk.size_gib else BOOT_DISK_GB,
    }
    if disk is not None and disk.tier is not None:
        params["disk_type"] = f"zones/{zone}/diskTypes/{DISK_TYPES[disk.tier]}"
    return params


def instance_body(
    provider: str,
    request: LaunchRequest,
    zone: str,
    name: str,
    tags: Mapping[str, str],
    price: float,
    *,
    image: str,
    install: str | None,
    network: str,
    service_account: str | None,
) -> Any:
    """The ``instances.insert`` body of one launch: the machine, the startup script and spothop's
    metadata items, spot or standard scheduling, the boot disk (:func:`boot_disk`), the network
    and the accelerators."""
    compute_v1 = sdk.import_compute()
    shape = parse.machine_shape(request.instance_type)
    env = {"SPOTHOP_CLOUD": provider, **request.env}
    script = render_startup_script(
        request.bootstrap_command,
        env,
        install=install,
        image=request.image,
        distribution=request.distribution,
    )
    items = {
        STARTUP_ITEM: script,
        TAGS_ITEM: json.dumps(dict(tags), sort_keys=True),
        PRICE_ITEM: number_text(price),
        TYPE_ITEM: request.instance_type,
    }
    scheduling: dict[str, Any] = {
        "on_host_maintenance": "TERMINATE",
        "automatic_restart": False,
    }
    if request.spot:
        scheduling |= {"provisioning_model": "SPOT", "instance_termination_action": "DELETE"}
    else:
        scheduling |= {"provisioning_model": "STANDARD"}
    body: dict[str, Any] = {
        "name": name,
        "machine_type": f"zones/{zone}/machineTypes/{shape.machine_type}",
        "labels": {parse.label_key(k): parse.label_value(v) for k, v in tags.items()},
        "metadata": {"items": [{"key": k, "value": v} for k, v in items.items()]},
        "scheduling": scheduling,
        "disks": [
            {
                "boot": True,
                "auto_delete": True,
                "initialize_params": boot_disk(request, zone, image),
            }
        ],
        "network_interfaces": [
            {
                "network": network,
                "access_configs": [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}],
            }
        ],
    }
    if shape.accelerator:
        body["guest_accelerators"] = [
            {
                "accelerator_type": f"zones/{zone}/acceleratorTypes/{shape.accelerator}",
                "accelerator_count": shape.accelerator_count,
            }
        ]
    if service_account:
        body["service_accounts"] = [{"email": service_account, "scopes": sdk.SCOPES}]
    return compute_v1.Instance(body)
