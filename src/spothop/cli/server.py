"""``spothop server``: run the control-plane server, and manage its users and tokens.

- ``server run``: the API (:func:`spothop.server.app.create_app`) under
  uvicorn, with a controller replica in a process of its own beside it
  (:mod:`spothop.server.controller`; ``--no-controller`` to run the API alone). Settings: ``$SPOTHOP_SERVER_DB``,
  ``$SPOTHOP_SERVER_QUEUE``, flags over them (``docs/server.md``).
- ``server users create NAME --project P``: a user and its first token (printed
  once: only its hash is kept). ``server users list``.
- ``server tokens create --user NAME``, ``server tokens list``,
  ``server tokens revoke TOKEN_ID`` (the id is the token's third part; a
  revocation holds at once on every replica).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Annotated, Any

import typer

from spothop.cli.output import console, note, print_json, table
from spothop.errors import EXIT_FAILED, EXIT_OK, ConfigError

log = logging.getLogger(__name__)

server_app = typer.Typer(
    help="The control-plane server: the REST API for the CLI and the agents, users and tokens.",
    no_args_is_help=True,
)
users_app = typer.Typer(help="The server's users (each in one project).", no_args_is_help=True)
tokens_app = typer.Typer(help="API tokens: make, list, revoke.", no_args_is_help=True)
server_app.add_typer(users_app, name="users")
server_app.add_typer(tokens_app, name="tokens")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="SPOTHOP_SERVER_DB",
        help="the server's database: postgresql://HOST/DB or sqlite:///PATH (default: the home's)",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
CONTROLLER_STOP_S = 10.0


def register(app: typer.Typer) -> None:
    app.add_typer(server_app, name="server")


def _tokens(db: str | None) -> Any:
    from spothop.state.tokens import TokenStore

    return TokenStore(db)


@server_app.command("run")
def run(
    db: DbOption = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            envvar="SPOTHOP_SERVER_QUEUE",
            help="the batch jobs' shard queue: redis://HOST:PORT/DB or a database URL (default: --db)",
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="address to listen on")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="port (0: any free one)")
    ] = 8350,
    replica_id: Annotated[
        str | None, typer.Option("--replica-id", help="this replica's name (default hostname-pid)")
    ] = None,
    lease_s: Annotated[
        float,
        typer.Option("--lease-s", min=1, max=3600, help="the controller's job lease, seconds"),
    ] = 15.0,
    no_controller: Annotated[
        bool, typer.Option("--no-controller", help="serve the API only; run no controller replica")
    ] = False,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            envvar="SPOTHOP_SERVER_URL",
            help="the URL agents call (behind a proxy: its https URL; default http://HOST:PORT)",
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            envvar="SPOTHOP_SERVER_FORWARDED_ALLOW_IPS",
            help="proxies whose X-Forwarded-For names the client, comma-separated addresses or"
            " networks (default: none; the peer is the client)",
        ),
    ] = None,
    access_log: Annotated[
        bool,
        typer.Option("--access-log", help="log every request (off: 500 heartbeats/s is a lot)"),
    ] = False,
    providers: Annotated[
        str | None,
        typer.Option(
            "--providers", help="the controller's providers, comma-separated (default: all)"
        ),
    ] = None,
) -> int:
    """Serve the API (and a controller replica) until SIGINT/SIGTERM."""
    import uvicorn

    from spothop.controlplane.prune import keep_days_setting
    from spothop.server.app import create_app, settle_heap
    from spothop.server.safety import install_log_filter
    from spothop.server.settings import Settings

    keep_days_setting()  # the controller's pruning of old code: a bad value said before serving
    settings = Settings.from_env(
        db_url=db,
        queue_url=queue,
        host=host,
        port=port,
        replica_id=replica_id,
        lease_s=lease_s,
        controller=not no_controller,
        public_url=public_url,
        forwarded_allow_ips=forwarded_allow_ips,
    )
    app = create_app(settings)
    proxies = settings.trusted_proxies()
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        access_log=access_log,
        log_level="info",
        timeout_graceful_shutdown=5,
        server_header=False,
        # uvicorn alone trusts X-Forwarded-For from loopback: only the named proxies here
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or "",
    )
    _log_to_stderr()
    install_log_filter(app.state.redactor)  # uvicorn made its handlers just now
    stop = threading.Event()
    server = uvicorn.Server(config)
    if settings.controller:
        names = tuple(p.strip() for p in providers.split(",") if p.strip()) if providers else ()
        controller = _start_controller(settings, names, stop, server)

        def release() -> None:
            """At the app's shutdown, before uvicorn re-raises the SIGTERM it caught: the replica
            releases its job leases and exits (another replica takes the jobs at once)."""
            stop.set()
            controller.join(CONTROLLER_STOP_S + 5)

        app.state.on_shutdown.append(release)
    settle_heap(app)  # (the controller replica is a process of its own, not a fork)
    try:
        server.run()
    finally:
        stop.set()
    return EXIT_OK if server.started else EXIT_FAILED


def _log_to_stderr() -> None:
    """spothop's warnings, and the server's own notes, beside uvicorn's lines on stderr."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.WARNING, format="%(levelname)s:     %(name)s: %(message)s"
        )
    for name in ("spothop.cli.server", "spothop.server"):
        logging.getLogger(name).setLevel(logging.INFO)


def _start_controller(
    settings: Any, providers: tuple[str, ...], stop: threading.Event, server: Any
) -> threading.Thread:
    """The controller replica in a process of its own (:mod:`spothop.server.controller`), started
    once uvicorn listens (its agents are given this server's URL and a token each), stopped when
    ``stop`` is set (it releases its job leases). The thread returned ends once it has."""
    import os

    from spothop.server.controller import ControllerProcess, ControllerSettings

    def main() -> None:
        while not server.started and not stop.is_set():
            stop.wait(0.05)
        if stop.is_set():
            return
        port = server.servers[0].sockets[0].getsockname()[1]
        url = settings.agents_url(port)
        log.info("controller replica %s: agents call %s", settings.replica_id, url)
        child = ControllerProcess(
            ControllerSettings(
                store_url=settings.store_url,
                queue_url=settings.jobs_queue_url,
                replica_id=settings.replica_id,
                lease_s=settings.lease_s,
                providers=providers,
                control_plane_url=url,
                parent_pid=os.getpid(),
            )
        ).start()
        stop.wait()
        child.stop(CONTROLLER_STOP_S)

    thread = threading.Thread(target=main, name="controller-replica", daemon=True)
    thread.start()
    return thread


# -- users ----------------------------------------------------------------------------


@users_app.command("create")
def users_create(
    name: Annotated[
        str, typer.Argument(help="the user's name (lower-case letters, digits, . _ -)")
    ],
    project: Annotated[str, typer.Option("--project", help="the user's project (made if new)")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make a user and its first token; the token is printed once (only its hash is kept)."""
    user, token = _tokens(db).create_user(name, project)
    if as_json:
        print_json({**user.to_dict(), "token": token})
        return
    console.print(f"user {user.name} (project {user.project}); its token, shown this once:")
    console.print(token)
    note("keep it secret: export SPOTHOP_TOKEN=<token> and SPOTHOP_SERVER=http://HOST:PORT")


@users_app.command("list")
def users_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Every user: name, project, when made."""
    users = _tokens(db).users()
    if as_json:
        print_json([u.to_dict() for u in users])
        return
    if not users:
        note("no users yet: spothop server users create NAME --project PROJECT")
        return
    console.print(
        table(
            None,
            ["user", "project", "created"],
            [(u.name, u.project, _when(u.created_unix_s)) for u in users],
        )
    )


# -- tokens ---------------------------------------------------------------------------


@tokens_app.command("create")
def tokens_create(
    user: Annotated[str, typer.Option("--user", help="whose token")],
    label: Annotated[str, typer.Option("--label", help="what it is for (laptop, CI)")] = "",
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Another token for a user; printed once."""
    token = _tokens(db).create_user_token(user, label)
    if as_json:
        print_json({"user": user, "label": label, "token": token})
        return
    console.print(token)


@tokens_app.command("list")
def tokens_list(
    user: Annotated[str | None, typer.Option("--user", help="only this user's")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="user or agent")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Tokens (ids and whose, never the tokens themselves)."""
    if kind not in (None, "user", "agent"):
        raise ConfigError(f"--kind {kind!r}: use user or agent")
    records = _tokens(db).tokens(user=user, kind=kind)
    if as_json:
        print_json([r.to_dict() for r in records])
        return
    console.print(
        table(
            None,
            ["token id", "kind", "user / job", "project", "label", "created", "revoked"],
            [
                (
                    r.token_id,
                    r.kind,
                    r.user if r.kind == "user" else f"{r.job_id} {r.instance_id}",
                    r.project,
                    r.label,
                    _when(r.created_unix_s),
                    _when(r.revoked_unix_s) if r.revoked_unix_s else "",
                )
                for r in records
            ],
        )
    )


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: Annotated[
        str, typer.Argument(help="the token's id (shp_u_<ID>_…, or from tokens list)")
    ],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> int:
    """Revoke a token: every replica refuses it from its next request on."""
    from spothop.state.tokens import parse_token

    parsed = parse_token(token_id)
    if parsed is not None:  # a whole token was given: take its id, never echo its secret
        token_id = parsed[1]
    revoked = _tokens(db).revoke(token_id)
    if as_json:
        print_json({"token_id": token_id, "revoked": revoked})
    elif revoked:
        console.print(f"revoked {token_id}")
    else:
        note(f"no live token {token_id} (spothop server tokens list shows them)")
    return EXIT_OK if revoked else EXIT_FAILED


def _when(unix_s: float | None) -> str:
    return "" if unix_s is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s))
