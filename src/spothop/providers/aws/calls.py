"""How the EC2 adapter calls AWS: one client per (service, region), retried and paged.

:class:`Ec2Calls` is the first floor of :class:`~spothop.providers.aws.provider.AwsProvider`
(prices, instances and launching build on it, in :mod:`.prices`,
:mod:`.instances` and :mod:`.launch`); ``AwsProvider.__init__`` sets the
attributes it declares.

- :meth:`Ec2Calls.client` makes a boto3 client on first use
  (:func:`spothop.providers.aws.sdk.make_client`) and keeps it.
- :meth:`Ec2Calls._call` makes one call through
  :func:`spothop.providers.aws.errors.with_retries`: a throttled call is
  retried, bounded, on the provider's clock; every error is spothop's type
  with EC2's code.
- :meth:`Ec2Calls._pages` yields every page of a ``NextToken``-paginated EC2
  call, each page retried on its own, at EC2's page size for the call
  (:data:`PAGE_SIZES`) or the provider's ``page_size`` where smaller.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spothop.market.clock import Clock
from spothop.providers.aws import sdk
from spothop.providers.aws.errors import with_retries

NAME = "aws"  # the provider's name, and the built-in catalog's name for EC2
FILTER_VALUES_MAX = 100  # values per filter in one call; more go in further calls
# EC2 keeps page sizes per call: DescribeInstanceTypes 5-100, the others 5-1000.
PAGE_SIZES = {
    "describe_instance_types": 100,
    "describe_instance_type_offerings": 1000,
    "describe_spot_price_history": 1000,
    "describe_instances": 1000,
}


class Ec2Calls:
    """The calls every part of the adapter makes; its attributes are set by ``AwsProvider``."""

    name: str
    regions: list[str]
    endpoint_url: str | None
    clock: Clock
    page_size: int | None
    _session: Any
    _clients: dict[tuple[str, str], Any]

    def client(self, region: str, service: str = "ec2") -> Any:
        """The boto3 client for ``service`` in ``region`` (one per pair, made on first use)."""
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = sdk.make_client(self._session, service, region, self.endpoint_url)
        return self._clients[key]

    def _call(self, region: str, operation: str, service: str = "ec2", **params: Any) -> Any:
        method = getattr(self.client(region, service), operation)
        return with_retries(lambda: method(**params), self.name, self.clock.sleep)

    def _pages(self, region: str, operation: str, **params: Any) -> Iterator[Any]:
        """Every page of a NextToken-paginated EC2 call, each page retried on its own."""
        size = PAGE_SIZES.get(operation)
        if size is not None and self.page_size is not None:
            size = min(size, self.page_size)
        token: str | None = None
        while True:
            args = dict(params)
            if size is not None:
                args["MaxResults"] = size
            if token:
                args["NextToken"] = token
            page = self._call(region, operation, **args)
            yield page
            token = page.get("NextToken")
            if not token:
                return
