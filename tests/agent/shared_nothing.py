"""Local-cloud instances that share nothing with the test but the network and a bucket.

An isolated local instance sees the OS, the world's python image (read-only)
and the world's buckets; not the test's store, its ``SPOTHOP_HOME`` or the
source tree. So a test that runs the agent on one:

- makes its folder the world's bucket: what both sides read or write (the worker
  script, its outputs, checkpoints, marker files) lives there (:meth:`Cloud.ship`);
- serves the agent API over its store (:func:`serve_agent_api`): each launch gets
  the control plane's URL, a token for its job and instance, and the control
  plane's wheel as its ``distribution`` (spothop on the instance is that wheel);
- runs plain ``python`` (the boot script's ``PATH`` finds the instance's own);
- reads the agent's instance-local state through the instance's folder
  (:meth:`Cloud.on_instance`), as an operator on the instance would.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import shutil
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spothop.providers.base import Instance, InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import DEFAULT_WORLD, load_world
from spothop.server.agent_serve import AgentApiServer, serve_agent_api
from spothop.state.tokens import TokenStore
from spothop.wire.contract import TOKEN_ENV

STATE_ROOT = "/var/lib/spothop/agent"  # where the tests' agents keep their state, on the instance
ENDED = [InstanceState.TERMINATED, InstanceState.PREEMPTED, InstanceState.FAILED]


@dataclass
class Cloud:
    """The default world's clouds with ``bucket`` as their bucket, and an agent API over ``store_url``."""

    bucket: Path
    world_path: Path
    server: AgentApiServer
    store_url: str
    tokens: TokenStore
    providers: dict[str, LocalProvider] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The control plane's URL: the agents' ``--control-plane`` (and an HTTP queue's URL)."""
        return self.server.url

    def provider(self, cloud: str) -> LocalProvider:
        if cloud not in self.providers:
            self.providers[cloud] = LocalProvider(
                cloud, world=load_world(self.world_path), world_path=self.world_path
            )
        return self.providers[cloud]

    def ship(self, *sources: Path, folder: str = "code") -> Path:
        """Copy ``sources`` (files or folders) into ``<bucket>/folder``; that folder."""
        target = self.bucket / folder
        target.mkdir(parents=True, exist_ok=True)
        for source in sources:
            if source.is_dir():
                shutil.copytree(
                    source, target / source.name, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy(source, target / source.name)
        return target

    def agent(self, *options: str, worker: Sequence[str]) -> list[str]:
        """The agent's command on an instance: plain ``python``, this control plane."""
        return [
            "python", "-m", "spothop.agent", "run", "--control-plane", self.url,
            *options, "--", *worker,
        ]  # fmt: skip

    def launch(
        self,
        cloud: str,
        place: tuple[str, str, str],
        job_id: str,
        command: list[str],
        env: dict[str, str] | None = None,
    ) -> Instance:
        """Launch ``command`` on ``cloud`` at ``place`` (instance type, region, zone) with a token for
        ``job_id``, issued before the launch and bound to the instance once it is named (as the
        executor does; the agent's link retries until then)."""
        instance_type, region, zone = place
        placeholder = f"launch-{uuid.uuid4().hex}"
        token = self.tokens.issue_agent_token(job_id, placeholder)
        instance = self.provider(cloud).launch(
            LaunchRequest(
                instance_type=instance_type,
                region=region,
                zone=zone,
                bootstrap_command=command,
                env={**(env or {}), TOKEN_ENV: token},
                distribution=self.server.distribution,
            )
        )
        self.tokens.bind_agent_token(job_id, placeholder, instance.instance_id)
        return instance

    def on_instance(self, instance: Instance, path: str) -> Path:
        """``path`` of ``instance``'s own disk, seen from the test (its folder's ``root``)."""
        row = self.provider(instance.provider).store.instance(instance.instance_id)
        assert row is not None, instance
        return Path(row["directory"]) / "root" / path.lstrip("/")

    def console(self, instance: Instance) -> str:
        return self.provider(instance.provider).console_output(instance.instance_id)

    def end_all(self) -> None:
        """Terminate every instance launched, and wait for each to end."""
        for provider in self.providers.values():
            for instance in provider.list_instances():
                provider.terminate(instance.instance_id)
        for provider in self.providers.values():
            for instance in provider.list_instances():
                provider.wait(instance.instance_id, ENDED, 20)


def world_with_bucket(bucket: Path, path: Path) -> Path:
    """The default world, with ``bucket`` its bucket, written to ``path``."""
    text = (
        importlib.resources.files("spothop.providers.local")
        .joinpath(f"data/{DEFAULT_WORLD}")
        .read_text(encoding="utf-8")
    )
    path.write_text(f"{text}\nbuckets: [{str(bucket)!r}]\n", encoding="utf-8")
    return path


@contextlib.contextmanager
def shared_nothing(folder: Path, queue_url: str | None = None) -> Iterator[Cloud]:
    """A :class:`Cloud` whose bucket is ``folder/bucket`` (the only part of ``folder`` an instance
    sees): its store ``folder/control.db``, its queue ``queue_url`` (default: the store). On exit
    every instance is ended and the API stopped."""
    bucket = folder / "bucket"
    bucket.mkdir()
    store_url = f"sqlite:///{folder / 'control.db'}"
    world_path = world_with_bucket(bucket, folder / "world.yaml")
    server = serve_agent_api(None, store_url, queue_url or store_url)
    cloud = Cloud(bucket, world_path, server, store_url, TokenStore(store_url))
    try:
        yield cloud
    finally:
        try:
            cloud.end_all()
        finally:
            server.shutdown()
