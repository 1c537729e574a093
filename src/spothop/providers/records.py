"""What every cloud adapter shares about its instances: the tags spothop puts on them, launch
tokens, the family's options, the cost of a record, the small text helpers.

Tags: every instance spothop launches carries :data:`TOKEN_TAG` (the launch
token, also the cloud's idempotency key) and, when the launch names one,
:data:`NODE_TAG`; :func:`find_instances` searches by the token tag. An adapter
keeps only how its cloud spells tags (key/value lists, labels) and its calls.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from spothop.errors import ConfigError
from spothop.providers.base import MICROUSD_PER_USD, Instance, Provider

TOKEN_TAG = "spothop-token"
NODE_TAG = "spothop-node"


def new_token() -> str:
    """A launch token: ``sh-`` and 24 hex digits (label-safe, ≤ 64 ASCII for any idempotency key)."""
    return "sh-" + secrets.token_hex(12)


def launch_tags(
    tags: Mapping[str, str], name: str | None, token: str
) -> tuple[dict[str, str], str | None]:
    """(the launch's tags with the token and the node, the node): the node is the launch's
    :data:`NODE_TAG` if set, else its name; None when it has neither."""
    out = {**tags, TOKEN_TAG: token}
    node = tags.get(NODE_TAG) or name
    if node:
        out.setdefault(NODE_TAG, node)
    return out, node


def ended_with_tags(
    ended: Mapping[str, Instance], tags: Mapping[str, str] | None
) -> dict[str, Instance]:
    """The records of instances this provider ended (by id) that carry every one of ``tags``."""
    return {
        instance_id: instance
        for instance_id, instance in ended.items()
        if all(instance.tags.get(k) == v for k, v in (tags or {}).items())
    }


def cost_microusd(price_usd_per_hour: float, billed_seconds: float) -> int:
    """What ``billed_seconds`` at ``price_usd_per_hour`` cost, in integer micro-dollars."""
    return round(price_usd_per_hour * billed_seconds / 3600 * MICROUSD_PER_USD)


def family_options(
    options: Mapping[str, Any], taken: Iterable[str], env_options: Mapping[str, str]
) -> dict[str, Any]:
    """The options a family's ``create`` passes on: those in ``taken`` that are not None, then
    each of ``env_options`` (option → environment variable) not given, from a non-empty variable."""
    names = set(taken)
    given = {k: v for k, v in options.items() if k in names and v is not None}
    for option, variable in env_options.items():
        if option not in given and os.environ.get(variable):
            given[option] = os.environ[variable]
    return given


def split_list(value: Sequence[str] | str | None) -> list[str]:
    """A list option: a comma-separated string or a sequence, blanks dropped, parts stripped."""
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip() for p in parts if p.strip()]


def number_text(value: float) -> str:
    """A number as a tag value: at most six decimals, no trailing zeros (``0`` for zero)."""
    return f"{value:.6f}".rstrip("0").rstrip(".") or "0"


def iso_seconds(stamp: str) -> float:
    """Epoch seconds of an ISO 8601 time, ``Z`` for UTC allowed."""
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class OneNameFamily:
    """A registry family that serves one provider name (an adapter for one cloud).

    A subclass sets ``provider_name``, ``adapter`` (named in the error for a
    wrong name), ``provider_class``, ``taken`` (the options ``create`` passes
    on) and ``env_options`` (see :func:`family_options`).
    """

    provider_name: ClassVar[str]
    adapter: ClassVar[str]
    provider_class: ClassVar[Callable[..., Provider]]
    taken: ClassVar[frozenset[str]]
    env_options: ClassVar[Mapping[str, str]]

    def names(self, **options: Any) -> list[str]:
        return [self.provider_name]

    def create(self, name: str, **options: Any) -> Provider:
        if name != self.provider_name:
            raise ConfigError(
                f"the {self.adapter} adapter serves the provider {self.provider_name!r}, not {name!r}"
            )
        return type(self).provider_class(
            name, **family_options(options, self.taken, self.env_options)
        )
