"""The live catalog refresh: a provider's offerings now, diffed into the stored catalog, applied in place.

:func:`refresh_catalog` asks a provider for its offerings (its live API, for
a real cloud), compares them with what the catalog holds for that provider
(:func:`spothop.resources.diff.diff_catalogs`: typed change events), applies
the changes (:func:`~spothop.resources.diff.apply_changes`) and saves the
result as the provider's stored catalog (``$SPOTHOP_HOME/catalog/<provider>.csv``,
:func:`~spothop.resources.catalog.save_user_offerings`). Nothing restarts:
every :func:`~spothop.resources.catalog.load_catalog` after it reads the new
rows. ``spothop catalog refresh --provider NAME`` runs it; a daemon runs it
on its own schedule.

Rules:

- Only the regions the live answer covers are compared: a provider asked
  about one region does not remove the stored offerings of the others.
- A provider that lists nothing changes nothing (an empty answer is far more
  often a broken API or a wrong account than a cloud that sells nothing):
  :class:`~spothop.errors.ConfigError`, the stored catalog left as it was.
- What the provider could not get as asked (a price API out of reach, with
  the built-in prices standing in) comes back in ``notes``
  (:class:`~spothop.providers.extensions.OfferingNotes`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spothop.errors import ConfigError
from spothop.providers.base import Provider
from spothop.providers.extensions import OfferingNotes
from spothop.resources.catalog import Catalog, load_catalog, save_user_offerings
from spothop.resources.diff import CatalogChange, apply_changes, diff_catalogs
from spothop.resources.offering import Offering


@dataclass(frozen=True)
class RefreshResult:
    """What one refresh found and did. ``saved`` is the file written (None on a dry run)."""

    provider: str
    regions: list[str]
    live_offerings: int
    changes: list[CatalogChange]
    notes: list[str] = field(default_factory=list)
    saved: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "regions": self.regions,
            "live_offerings": self.live_offerings,
            "changes": [c.to_dict() for c in self.changes],
            "notes": list(self.notes),
            "saved": str(self.saved) if self.saved else None,
        }


def refresh_catalog(
    provider: Provider, *, min_change_pct: float = 0.0, save: bool = True
) -> RefreshResult:
    """Refresh ``provider``'s stored catalog from its live offerings (see the module docstring)."""
    if not min_change_pct >= 0:
        raise ConfigError(f"min_change_pct must be zero or more percent, got {min_change_pct}")
    live = [_with_originals(o) for o in provider.list_offerings() if o.provider == provider.name]
    notes = provider.offering_notes() if isinstance(provider, OfferingNotes) else []
    if not live:
        raise ConfigError(
            f"provider {provider.name!r} listed no offerings; the stored catalog is left as it was "
            "(check its credentials, regions and the notes above)"
            + (f": {'; '.join(notes)}" if notes else "")
        )
    regions = sorted({o.region for o in live})
    stored = [o for o in load_catalog(measured=False) if o.provider == provider.name]
    elsewhere = [o for o in stored if o.region not in regions]
    covered = Catalog(o for o in stored if o.region in regions)
    changes = diff_catalogs(covered, live, min_change_pct)
    saved = None
    if save:
        updated = apply_changes(covered, changes)
        comment = (
            f"Refreshed by `spothop catalog refresh --provider {provider.name}` on "
            f"{dt.date.today()} from the live API (regions {', '.join(regions)})"
            + "".join(f"\n{note}" for note in notes)
        )
        saved = save_user_offerings(provider.name, [*elsewhere, *updated], comment)
    return RefreshResult(provider.name, regions, len(live), changes, notes, saved)


def _with_originals(offering: Offering) -> Offering:
    """A USD offering's prices as its own currency's too: the stored catalog keeps those."""
    if offering.currency != "USD":
        return offering
    return offering.model_copy(
        update={
            "on_demand_price_original": offering.on_demand_price_usd_per_hour,
            "spot_price_original": offering.spot_price_usd_per_hour,
        }
    )
