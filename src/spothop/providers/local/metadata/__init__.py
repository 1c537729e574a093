"""Per-instance metadata endpoints that speak each real cloud's protocol.

Every local instance gets its own HTTP endpoint on 127.0.0.1 (its own port)
that answers as AWS IMDSv2, GCP's metadata server, Azure IMDS, Alibaba ECS,
Tencent CVM or Volcengine metadata would, so the agent's notice watchers run
unchanged on the local cloud. The instance learns where its endpoint is from
two environment variables, :data:`METADATA_URL_ENV` and
:data:`METADATA_PROTOCOL_ENV`.

::

    notices = NoticeState(clock=market.now)
    server = MetadataServer("aws", InstanceMetadata(...), notices)
    port = server.start()           # serving in a daemon thread
    env = {METADATA_URL_ENV: server.url, METADATA_PROTOCOL_ENV: "aws"}
    notices.schedule_termination(notice_at=t, terminate_at=t + 120)
    server.stop()

Adding a protocol: its module in this folder, one line in :data:`PROTOCOLS`.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from spothop.errors import ConfigError
from spothop.providers.local.metadata._http import MetadataHandler, MetadataHTTPServer
from spothop.providers.local.metadata.aliyun import AliyunMetadataHandler
from spothop.providers.local.metadata.aws import AwsImdsHandler
from spothop.providers.local.metadata.azure import AzureImdsHandler
from spothop.providers.local.metadata.gcp import GcpMetadataHandler
from spothop.providers.local.metadata.state import (
    MAINTENANCE_EVENTS,
    Clock,
    InstanceMetadata,
    NoticeSnapshot,
    NoticeState,
    ScheduledEvent,
)
from spothop.providers.local.metadata.tencent import TencentMetadataHandler
from spothop.providers.local.metadata.volcengine import VolcengineMetadataHandler

__all__ = [
    "MAINTENANCE_EVENTS",
    "METADATA_PROTOCOL_ENV",
    "METADATA_URL_ENV",
    "PROTOCOLS",
    "Clock",
    "InstanceMetadata",
    "MetadataHandler",
    "MetadataServer",
    "NoticeSnapshot",
    "NoticeState",
    "ScheduledEvent",
    "check_options",
]

METADATA_URL_ENV = "SPOTHOP_METADATA_URL"  # the endpoint's base URL, e.g. http://127.0.0.1:41234
METADATA_PROTOCOL_ENV = "SPOTHOP_METADATA_PROTOCOL"  # a key of PROTOCOLS

PROTOCOLS: dict[str, type[MetadataHandler]] = {
    "aws": AwsImdsHandler,
    "gcp": GcpMetadataHandler,
    "azure": AzureImdsHandler,
    "aliyun": AliyunMetadataHandler,
    "tencent": TencentMetadataHandler,
    "volcengine": VolcengineMetadataHandler,
}

# ``endpoint: down``: the instance's agent and worker are handed an address nothing answers, as a
# firewall or a container without a route to the link-local address leaves them: the agent's
# start-up check finds no endpoint and the instance is notice-blind (its notices never arrive).
ENDPOINT_OPTION = "endpoint"
COMMON_OPTION_VALUES: Mapping[str, frozenset[str]] = {ENDPOINT_OPTION: frozenset({"up", "down"})}
UNREACHABLE_URL = "http://127.0.0.1:9"  # the discard port: connection refused

_STOP_POLL_S = 0.05  # how often serve_forever checks for shutdown


def check_options(protocol: str, options: Mapping[str, Any] | None) -> type[MetadataHandler]:
    """The handler of ``protocol``; ConfigError naming what is accepted for an unknown protocol or option."""
    handler = PROTOCOLS.get(protocol)
    if handler is None:
        raise ConfigError(
            f"unknown metadata protocol {protocol!r}; known protocols: {', '.join(sorted(PROTOCOLS))}"
        )
    options = dict(options or {})
    endpoint = options.pop(ENDPOINT_OPTION, "up")  # every protocol takes it (COMMON_OPTION_VALUES)
    if endpoint not in COMMON_OPTION_VALUES[ENDPOINT_OPTION]:
        raise ConfigError(
            f"metadata option {ENDPOINT_OPTION}={endpoint!r} is not one of "
            f"{', '.join(sorted(COMMON_OPTION_VALUES[ENDPOINT_OPTION]))}"
        )
    unknown = sorted(set(options) - handler.OPTIONS)
    if unknown:
        accepted = ", ".join(sorted(handler.OPTIONS)) or "none"
        raise ConfigError(
            f"metadata protocol {protocol!r} takes no option {', '.join(map(repr, unknown))} (accepted: {accepted})"
        )
    for name, allowed in handler.OPTION_VALUES.items():
        if name in options and options[name] not in allowed:
            raise ConfigError(
                f"metadata option {name}={options[name]!r} for {protocol!r} is not one of {', '.join(sorted(allowed))}"
            )
    return handler


class MetadataServer:
    """One instance's metadata endpoint: ``protocol`` served over ``metadata`` and ``notices``.

    Contracts:

    - An unknown ``protocol``, or an option the protocol does not take
      (``options``; e.g. ``{"require_token": True}`` for ``aliyun``), raises
      :class:`~spothop.errors.ConfigError` naming the known ones, at construction.
    - :meth:`start` binds ``host:port`` (``port=0``: a free port), serves in a
      daemon thread and returns the port; a port in use raises ``ConfigError``
      naming it. Starting twice returns the same port.
    - :meth:`stop` is idempotent and returns once the listener is closed; a
      hanging GET still in flight is answered with the current value.
    - Request logging goes to stderr only with ``debug=True``.
    """

    def __init__(
        self,
        protocol: str,
        metadata: InstanceMetadata,
        notices: NoticeState,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        options: Mapping[str, Any] | None = None,
        debug: bool = False,
    ) -> None:
        handler = check_options(protocol, options)
        options = dict(options or {})
        # ``endpoint`` is the host's to act on (agent_url), not the handler's.
        self.endpoint_down = options.pop(ENDPOINT_OPTION, "up") == "down"
        self.protocol = protocol
        self.metadata = metadata
        self.notices = notices
        self.host = host
        self._port = port
        self._handler = handler
        self._options = options
        self._debug = debug
        self._server: MetadataHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> int:
        """Bind and serve in a daemon thread; return the port."""
        with self._lock:
            if self._server is not None:
                return self._server.server_address[1]
            try:
                server = MetadataHTTPServer(
                    (self.host, self._port),
                    self._handler,
                    self.metadata,
                    self.notices,
                    self._options,
                    self._debug,
                )
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ConfigError(
                        f"metadata port {self._port} on {self.host} is already in use; pick another port or 0 for any free one"
                    ) from exc
                raise ConfigError(
                    f"cannot serve metadata on {self.host}:{self._port}: {exc.strerror or exc}"
                ) from exc
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": _STOP_POLL_S},
                name=f"metadata-{self.protocol}-{self.metadata.instance_id}",
                daemon=True,
            )
            self._thread.start()
            return server.server_address[1]

    @property
    def port(self) -> int:
        """The bound port; ``RuntimeError`` before :meth:`start`."""
        if self._server is None:
            raise RuntimeError("metadata server not started; call start() first")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """``http://<host>:<port>``, with no trailing slash; ``RuntimeError`` before :meth:`start`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the port. Safe to call twice, or before :meth:`start`."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server, self._thread = None, None
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> MetadataServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
