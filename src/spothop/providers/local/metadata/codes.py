"""The shapes of one cloud's API answers: its error codes and its instance ids.

Each protocol module of this folder declares one :class:`ErrorCodes` and one
:class:`InstanceIdShape` beside its metadata handler, as plain data with no
SDK behind it. The local cloud raises its launch errors with these codes and
names its instances in these shapes; a real adapter imports the same tables
(``from spothop.providers.local.metadata.<protocol> import ERROR_CODES``) to
turn its SDK's errors into spothop's, so the simulated and the real codes
cannot drift apart.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass, field

HEX_DIGITS = "0123456789abcdef"
DECIMAL_DIGITS = string.digits
LOWER_ALNUM = string.digits + string.ascii_lowercase


@dataclass(frozen=True)
class ErrorCodes:
    """How one cloud's API spells the failures the provider contract names.

    ``price_too_low`` is ``None`` for a cloud that states no dedicated code for
    a maximum price under the market price; a bid there is refused with its
    ``invalid_parameter`` code (see :meth:`bid_refused`).
    """

    capacity_unavailable: str  # no spot capacity for the type in that zone now
    instance_not_found: str  # describe of an id the cloud does not know
    invalid_parameter: str  # a type not sold there, a market that does not exist
    internal_error: str  # the cloud failed on its side
    price_too_low: str | None = None  # a maximum price under the market price

    @property
    def bid_refused(self) -> str:
        """The code a launch gets when its maximum price is under the market's."""
        return self.price_too_low or self.invalid_parameter


@dataclass(frozen=True)
class InstanceIdShape:
    """An instance id: ``prefix`` then ``length`` characters of ``alphabet``.

    ``leading`` restricts the first generated character (a numeric id without
    a leading zero); empty means any of ``alphabet``.
    """

    prefix: str
    alphabet: str
    length: int
    leading: str = ""
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        first = re.escape(self.leading or self.alphabet)
        rest = re.escape(self.alphabet)
        regex = rf"{re.escape(self.prefix)}[{first}][{rest}]{{{self.length - 1}}}"
        object.__setattr__(self, "pattern", re.compile(regex))

    def new(self) -> str:
        """A fresh random id of this shape."""
        first = secrets.choice(self.leading or self.alphabet)
        rest = "".join(secrets.choice(self.alphabet) for _ in range(self.length - 1))
        return self.prefix + first + rest

    def matches(self, instance_id: str) -> bool:
        return self.pattern.fullmatch(instance_id) is not None


@dataclass(frozen=True)
class IdQuery:
    """How the cloud's own images ask the metadata endpoint for the instance id (the boot script's
    ``instance_id_lines``): GET ``path`` with ``headers``; first a token PUT to ``token_path`` with
    ``token_ttl_header`` where the cloud is session-based, the token sent in ``token_header``;
    ``json_key``: the answer is JSON and the id is that key's string."""

    path: str = "/latest/meta-data/instance-id"
    headers: tuple[str, ...] = ()
    token_path: str | None = None
    token_ttl_header: str = ""
    token_header: str = ""
    json_key: str | None = None
