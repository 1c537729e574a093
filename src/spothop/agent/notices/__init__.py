"""Notice watchers, one module per cloud protocol; :data:`WATCHERS` maps a protocol name to its class.

Adding a protocol: its module here, one line in :data:`WATCHERS`. The
protocol names are those of the local cloud's metadata endpoints
(``SPOTHOP_METADATA_PROTOCOL``).
"""

from __future__ import annotations

from typing import Any

from spothop.agent.notices.aliyun import AliyunWatcher
from spothop.agent.notices.aws import AwsWatcher
from spothop.agent.notices.azure import AzureWatcher
from spothop.agent.notices.base import Watcher
from spothop.agent.notices.gcp import GcpWatcher
from spothop.agent.notices.sigterm import SigtermWatcher, sigterm_notice
from spothop.agent.notices.tencent import TencentWatcher
from spothop.agent.notices.volcengine import VolcengineWatcher
from spothop.wire.errors import AgentConfigError

WATCHERS: dict[str, type[Watcher]] = {
    "aws": AwsWatcher,
    "gcp": GcpWatcher,
    "azure": AzureWatcher,
    "aliyun": AliyunWatcher,
    "tencent": TencentWatcher,
    "volcengine": VolcengineWatcher,
    "sigterm": SigtermWatcher,
}

__all__ = ["WATCHERS", "Watcher", "make_watcher", "sigterm_notice"]


def make_watcher(protocol: str, base_url: str | None, **kwargs: Any) -> Watcher:
    """The watcher for ``protocol``; AgentConfigError naming the known ones for an unknown name."""
    cls = WATCHERS.get(protocol)
    if cls is None:
        raise AgentConfigError(
            f"unknown notice protocol {protocol!r}; known: {', '.join(sorted(WATCHERS))}"
        )
    return cls(base_url, **kwargs)
