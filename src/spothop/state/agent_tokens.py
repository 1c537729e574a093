"""The agent tokens of :class:`~spothop.state.tokens.TokenStore`: one job's instance each, issued
for a launch and bound to its instance (the store's contract, points 3 and 3a)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from sqlalchemy import Connection, Engine, and_, or_, select, text, update

from spothop.errors import ConfigError
from spothop.state.auth_tables import api_tokens
from spothop.state.migrate import PG_LOCK_CLASS
from spothop.state.principal import Principal

log = logging.getLogger(__name__)

# The second class of spothop's PostgreSQL advisory locks: one instance's first-use binds.
BIND_LOCK_CLASS = PG_LOCK_CLASS + 1


def _lock_instance(conn: Connection, instance_id: str) -> None:
    """Hold, until ``conn``'s transaction ends, the lock on first-use binds to ``instance_id``.

    A bind checks that no other live token names the instance, then writes its own row. Under
    PostgreSQL's read committed, two binds of different tokens to one instance each check
    before the other commits and both bind; the lock makes the second check after the first
    commits. SQLite writes one transaction at a time: nothing to take.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:cls, hashtext(:instance))"),
            {"cls": BIND_LOCK_CLASS, "instance": instance_id},
        )


class AgentTokens:
    """Agent tokens: issued, bound, listed and revoked (mixed into ``TokenStore``)."""

    engine: Engine
    _issue: Callable[..., str]

    def issue_agent_token(
        self, job_id: str, instance_id: str, *, project: str | None = None
    ) -> str:
        """A token for the agent of ``instance_id`` in ``job_id``: it may touch only those."""
        if not job_id or not instance_id or len(job_id) > 128 or len(instance_id) > 128:
            raise ConfigError(
                f"an agent token needs a job id and an instance id of 1-128 characters, got"
                f" {job_id!r}, {instance_id!r}"
            )
        return self._issue("agent", job_id=job_id, instance_id=instance_id, project=project)

    def issue_launch_token(
        self, job_id: str, launch_token: str, *, project: str | None = None
    ) -> str:
        """A token for the agent of the instance that the launch ``launch_token`` of ``job_id``
        makes: it names the launch token until it is bound to the instance (contract, 3a)."""
        if not job_id or not launch_token or len(job_id) > 128 or len(launch_token) > 128:
            raise ConfigError(
                f"an agent token needs a job id and a launch token of 1-128 characters, got"
                f" {job_id!r}, {launch_token!r}"
            )
        return self._issue(
            "agent",
            job_id=job_id,
            instance_id=launch_token,
            launch_token=launch_token,
            project=project,
        )

    def bind_agent_token(self, job_id: str, placeholder: str, instance_id: str) -> int:
        """Bind the job's live agent tokens issued for the launch ``placeholder`` to
        ``instance_id``, the instance the cloud launched for it; how many changed.

        A launch gives the instance its token before the cloud has named it: the controller
        issues it for the attempt's launch token and binds it here once the launch returns (or
        the observer adopts the instance by its launch token). The instance may have bound it
        first (:meth:`bind_on_first_use`): to the same id, nothing changes (0); to another, the
        cloud's answer wins: the token is moved to ``instance_id`` and the instance that used
        it first is refused from then on, with a warning naming both.
        """
        c = api_tokens.c
        live = and_(c.kind == "agent", c.job_id == job_id, c.revoked_unix_s.is_(None))
        of_launch = or_(
            c.launch_token == placeholder,
            and_(c.launch_token.is_(None), c.instance_id == placeholder),  # issued before 0017
        )
        with self.engine.begin() as conn:
            misbound = [
                (str(r.token_id), str(r.instance_id))
                for r in conn.execute(
                    select(c.token_id, c.instance_id).where(
                        live, of_launch, c.instance_id != placeholder, c.instance_id != instance_id
                    )
                )
            ]
            changed = conn.execute(
                update(api_tokens)
                .where(live, of_launch, c.instance_id != instance_id)
                .values(instance_id=instance_id)
            ).rowcount
        for token_id, first in misbound:
            log.warning(
                "agent token %s of job %s (launch %s) was first used by instance %r, but the"
                " cloud launched %r for that launch: the token is bound to %r, and %r is refused"
                " from now on (an impostor holding the token, or a second instance of one launch)",
                token_id,
                job_id,
                placeholder,
                first,
                instance_id,
                instance_id,
                first,
            )
        return int(changed)

    def bind_on_first_use(
        self, principal: Principal, instance_id: str, *, conn: Connection | None = None
    ) -> Principal:
        """``principal`` (an agent's, :attr:`Principal.unbound`) bound to ``instance_id``, the
        instance its first request names, when no other request bound it first; the token's
        principal as it now stands either way (the caller's scope check then refuses a request
        about an instance the token is not bound to).

        One conditional update: of two first requests naming different instances exactly one
        binds. Refused (the principal left as it was) when ``instance_id`` is another live
        token's instance (of any job), or another attempt's, or not the instance the launch's own
        attempt has recorded: a token names one instance, and never one that is someone else's.
        ``conn``: in that transaction (the server's batch of heartbeats), else in one of its own.
        """
        if not principal.unbound or not instance_id or len(instance_id) > 128:
            return principal
        if instance_id == principal.launch_token:
            return principal  # the launch is no instance
        if conn is None:
            with self.engine.begin() as own:
                return self.bind_on_first_use(principal, instance_id, conn=own)
        from spothop.state.job_tables import job_attempts

        _lock_instance(conn, instance_id)
        c, a = api_tokens.c, job_attempts.c
        others = api_tokens.alias("others")
        taken_by_token = (  # any job's: an instance's heartbeat row is the instance's alone
            select(others.c.token_id)
            .where(
                others.c.kind == "agent",
                others.c.instance_id == instance_id,
                others.c.revoked_unix_s.is_(None),
            )
            .exists()
        )
        this_launch = and_(a.job_id == principal.job_id, a.launch_token == principal.launch_token)
        taken_by_attempt = (
            select(a.attempt_id)
            .where(
                or_(
                    and_(a.instance_id == instance_id, ~this_launch),  # another attempt's
                    and_(this_launch, a.instance_id.is_not(None), a.instance_id != instance_id),
                )
            )
            .exists()
        )
        bound = conn.execute(
            update(api_tokens)
            .where(
                c.token_id == principal.token_id,
                c.instance_id == c.launch_token,  # still unbound: the first bind wins
                c.revoked_unix_s.is_(None),
                ~taken_by_token,
                ~taken_by_attempt,
            )
            .values(instance_id=instance_id)
        ).rowcount
        row = conn.execute(
            select(c.instance_id, c.revoked_unix_s).where(c.token_id == principal.token_id)
        ).first()
        if bound:
            log.info(
                "agent token %s of job %s (launch %s) bound on its first use to instance %r",
                principal.token_id,
                principal.job_id,
                principal.launch_token,
                instance_id,
            )
        if row is None or row.revoked_unix_s is not None:
            return principal
        return replace(principal, instance_id=row.instance_id)

    def live_launch_tokens(
        self, job_ids: Iterable[str] | None = None
    ) -> list[tuple[str, str, str | None]]:
        """(job id, instance id, launch token or None) of every live agent token (of ``job_ids``
        when given): what the controller binds and revokes by."""
        c = api_tokens.c
        query = select(c.job_id, c.instance_id, c.launch_token).where(
            c.kind == "agent", c.revoked_unix_s.is_(None)
        )
        if job_ids is not None:
            query = query.where(c.job_id.in_(sorted(set(job_ids))))
        with self.engine.connect() as conn:
            return [
                (str(r[0]), str(r[1]), None if r[2] is None else str(r[2]))
                for r in conn.execute(query)
            ]

    def live_agent_tokens(self, job_ids: Iterable[str] | None = None) -> list[tuple[str, str]]:
        """(job id, instance id) of every live agent token (of ``job_ids`` when given)."""
        c = api_tokens.c
        query = select(c.job_id, c.instance_id).where(c.kind == "agent", c.revoked_unix_s.is_(None))
        if job_ids is not None:
            query = query.where(c.job_id.in_(sorted(set(job_ids))))
        with self.engine.connect() as conn:
            return [(str(r[0]), str(r[1])) for r in conn.execute(query)]

    def revoke_agent_tokens(self, job_id: str, instance_id: str | None = None) -> int:
        """Revoke every live agent token of the instance (or of every instance of the job); how many."""
        c = api_tokens.c
        where = and_(c.kind == "agent", c.job_id == job_id, c.revoked_unix_s.is_(None))
        if instance_id is not None:
            where = and_(where, c.instance_id == instance_id)
        with self.engine.begin() as conn:
            return conn.execute(
                update(api_tokens).where(where).values(revoked_unix_s=time.time())
            ).rowcount
