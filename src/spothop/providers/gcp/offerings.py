"""Compute Engine's machine and accelerator types, turned into spothop's offerings.

Compute Engine sells GPUs two ways, and spothop names both as instance types:

- accelerator-optimized machine types (A2, A3, G2) carry their GPUs
  (``MachineType.accelerators``): the type is the machine type's name;
- an N1 machine with GPUs attached (T4, V100): the synthetic type
  ``<machine type>+<count>x<accelerator type>`` (``n1-standard-8+1xnvidia-tesla-t4``),
  launched as the machine type plus ``guestAccelerators``.

The Compute Engine API has no prices (they are in the Cloud Billing Catalog,
another API); offerings are what the API says a zone sells, with the GPU,
interconnect and prices of the built-in catalog's row for the type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spothop.errors import ConfigError

_ATTACHED = re.compile(
    r"^(?P<machine>[a-z0-9-]+)\+(?P<count>[1-9][0-9]*)x(?P<accelerator>[a-z0-9-]+)$"
)
MIB_PER_GIB = 1024


@dataclass(frozen=True)
class MachineShape:
    """How one spothop instance type is launched: the machine type and any GPUs attached to it."""

    machine_type: str
    accelerator: str | None = None
    accelerator_count: int = 0


def machine_shape(instance_type: str) -> MachineShape:
    """``n1-standard-8+1xnvidia-tesla-t4`` → (n1-standard-8, nvidia-tesla-t4, 1); ``g2-standard-4`` → itself."""
    if "+" not in instance_type:
        return MachineShape(instance_type)
    match = _ATTACHED.match(instance_type)
    if match is None:
        raise ConfigError(
            f"instance type {instance_type!r} is neither a machine type nor "
            "'<machine type>+<count>x<accelerator type>' (e.g. n1-standard-8+1xnvidia-tesla-t4)"
        )
    return MachineShape(match["machine"], match["accelerator"], int(match["count"]))


def tail(url: str) -> str:
    """The last part of a resource URL (``…/zones/us-central1-a`` → ``us-central1-a``)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def region_of_zone(zone: str) -> str:
    """``us-central1-a`` → ``us-central1``."""
    return zone.rsplit("-", 1)[0]


_LABEL_BAD = re.compile(r"[^a-z0-9_-]")


def label_value(value: str) -> str:
    """A label value under Compute Engine's rules: lower-case letters, digits, ``_`` and ``-``, ≤ 63."""
    return _LABEL_BAD.sub("-", value.lower())[:63]


def label_key(key: str) -> str:
    """A label key: as a value, and starting with a lower-case letter."""
    made = label_value(key)
    return made if made[:1].isalpha() else ("k" + made)[:63]


def resource_name(base: str, suffix: str) -> str:
    """An instance name (RFC 1035: ``[a-z]([-a-z0-9]{0,61}[a-z0-9])?``) from ``base`` and a suffix."""
    stem = re.sub(r"[^a-z0-9-]", "-", base.lower()).strip("-") or "spothop"
    if not stem[0].isalpha():
        stem = "sh-" + stem
    stem = re.sub(r"-+", "-", stem)[: 62 - len(suffix) - 1].rstrip("-")
    return f"{stem}-{suffix}"
