"""Fixtures of the end-to-end tests across layers: the data-parallel runs' shared reference."""

from __future__ import annotations

from tests.e2e.ddp_helpers import ddp_reference

__all__ = ["ddp_reference"]
