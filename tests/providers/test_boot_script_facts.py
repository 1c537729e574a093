"""Item 7 of issue N: the boot script a real cloud gets holds no controller-side fact.

An instance shares nothing with the controller but the network. The launch
request is built the way the controller builds one (the executor's
``_request``: the job's spec, a candidate, a stored attempt, the agent's
command and env from :func:`spothop.jobs.launcher.bootstrap`), in the
embedded setup (a SQLite store in the home, the agent API ``spothop controller
run`` serves on loopback) and in server mode (a PostgreSQL store with a
password, a public control-plane URL), with the control plane's wheel as the
launch's distribution. Every real adapter's
boot script for it (EC2 and Alibaba user-data, the Compute Engine startup
script, each through its public render function, with the env each adapter
adds) must not hold:

- ``interpreter``: the controller's interpreter (``sys.executable``,
  ``sys.prefix``, ``sys.base_prefix`` unless ``/usr`` or ``/usr/local``): an
  instance has its own, on its PATH;
- ``home``: the name ``SPOTHOP_HOME`` or the controller's home;
- ``database_url``: a store URL (``sqlite:``, ``postgresql:``/``postgres:``)
  or a Redis URL with a password;
- ``credential``: an AWS access key id (or any value of the controller's
  credential variables), a password in a URL;
- ``controller_paths``: an absolute path of the controller's disk: the test's
  tmp folder (the home, the store, the job's workdir), the source tree, the
  user's home.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller import Launch
from spothop.jobs.controller.executor import Executor
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.providers.aliyun.userdata import render_user_data as aliyun_user_data
from spothop.providers.aws.userdata import render_user_data as aws_user_data
from spothop.providers.base import Distribution, LaunchRequest
from spothop.providers.gcp.userdata import render_startup_script as gcp_startup_script
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.jobs.exec.test_executor import _candidate
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

Render = Callable[..., str]
# Each adapter's public render function and the provider name it puts in SPOTHOP_CLOUD.
ADAPTERS: dict[str, tuple[Render, str]] = {
    "aws": (aws_user_data, "aws"),
    "gcp": (gcp_startup_script, "gcp"),
    "aliyun": (aliyun_user_data, "aliyun"),
}

# Credentials in the controller's environment: none may reach an instance.
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
CONTROLLER_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "aliyun-secret-for-the-test-0123",
}
DB_PASSWORD = "hunter2-db-password"
SERVER_STORE = f"postgresql://spothop:{DB_PASSWORD}@db.internal:5432/spothop"
SERVER_QUEUE = "redis://cache.internal:6379/0"  # a direct Redis queue (no password) is allowed
CONTROL_PLANE = "https://spothop.example.com"
# What `spothop controller run` gives its instances: its agent API on loopback (the local cloud's).
EMBEDDED_CONTROL_PLANE = "http://127.0.0.1:8765"
WHEEL = "spothop-0.1.0-py3-none-any.whl"

DATABASE_URL = re.compile(r"\b(?:sqlite|postgres(?:ql)?(?:\+\w+)?):", re.IGNORECASE)
REDIS_WITH_PASSWORD = re.compile(r"\brediss?://[^\s/@]*:[^\s/@]+@")
PASSWORD_IN_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@", re.IGNORECASE)
AWS_ACCESS_KEY = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")


@dataclass(frozen=True)
class Built:
    """A launch request as the controller built it, and the controller's facts around it."""

    request: LaunchRequest
    home: Path
    tmp: Path


def _spec(kind: str, workdir: Path) -> dict[str, Any]:
    if kind == "task":
        return {
            "name": "train",
            "run": "python train.py",
            "setup": "pip install -r requirements.txt",
            "workdir": str(workdir),
            "checkpoint": {"url": "s3://team-ckpt/train"},
            "envs": {"EPOCHS": "3"},
        }
    return {
        "name": "embed",
        "kind": "batch",
        "run": "python embed.py",
        "batch": {"inputs": ["s3://team-data/in/*.jsonl"], "output": "s3://team-data/out"},
    }


def _build(tmp: Path, kind: str, server: bool) -> Built:
    """Launch once through the executor on a fake provider; the request it sent."""
    home = tmp / "home"
    workdir = tmp / "project"
    workdir.mkdir(parents=True)
    url = f"sqlite:///{tmp / 'store.db'}"
    store = JobStore(url)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=ManualClock())
    where: dict[str, Any] = (
        {"store_url": SERVER_STORE, "queue_url": SERVER_QUEUE, "control_plane_url": CONTROL_PLANE}
        if server
        else {"store_url": url, "control_plane_url": EMBEDDED_CONTROL_PLANE}
    )
    plane = where["control_plane_url"]
    wheel = Distribution(f"{plane}/v1/dist/{'0' * 64}/{WHEEL}", "0" * 64, WHEEL)
    executor = Executor(store, {provider.name: provider}, home=home, distribution=wheel, **where)
    try:
        job_id = store.create_job(load_job(_spec(kind, workdir)))
        offering = provider.list_offerings()[0]
        assert executor.step(Launch(job_id, 0, (_candidate(offering),), "tok-1", "first")).ok
        wait_for(lambda: not executor.launching(), 10, what="the launch to end")
        [request] = provider.requests
    finally:
        executor.close()
        store.close()
    return Built(request, home, tmp)


SCENARIOS = {
    "embedded-task": ("task", False),
    "embedded-batch": ("batch", False),
    "server-task": ("task", True),
    "server-batch": ("batch", True),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Built]]:
    """Every scenario's request, built once (the controller's credentials in its env)."""
    out: dict[str, Built] = {}
    with pytest.MonkeyPatch.context() as patch:
        for name, (kind, server) in SCENARIOS.items():
            tmp = tmp_path_factory.mktemp(name)
            patch.setenv("SPOTHOP_HOME", str(tmp / "home"))
            for key, value in CONTROLLER_CREDENTIALS.items():
                patch.setenv(key, value)
            out[name] = _build(tmp, kind, server)
    yield out


def render(adapter: str, request: LaunchRequest) -> str:
    """The boot script the adapter sends for ``request`` (the env each adapter adds, no install
    override: the adapter's default)."""
    function, cloud = ADAPTERS[adapter]
    env = {"SPOTHOP_CLOUD": cloud, **request.env}
    return function(
        request.bootstrap_command, env, image=request.image, distribution=request.distribution
    )


def _paths(*paths: Path | str) -> list[str]:
    """Each path and its resolved form, longest first, without '/' itself."""
    out = {str(p) for p in paths} | {str(Path(p).resolve()) for p in paths}
    return sorted((p for p in out if p not in ("/", "")), key=len, reverse=True)


# A system interpreter's prefix is every machine's: an instance's /usr is its own.
SYSTEM_PREFIXES = frozenset({"/usr", "/usr/local"})


def interpreter(script: str, built: Built) -> list[str]:
    prefixes = [p for p in (sys.prefix, sys.base_prefix) if p not in SYSTEM_PREFIXES]
    return [p for p in _paths(sys.executable, *prefixes) if p in script]


def home(script: str, built: Built) -> list[str]:
    return [f for f in ("SPOTHOP_HOME", *_paths(built.home)) if f in script]


def database_url(script: str, built: Built) -> list[str]:
    found = [m.group(0) for m in DATABASE_URL.finditer(script)]
    return found + [m.group(0) for m in REDIS_WITH_PASSWORD.finditer(script)]


def credential(script: str, built: Built) -> list[str]:
    found = [m.group(0) for m in AWS_ACCESS_KEY.finditer(script)]
    found += [m.group(0) for m in PASSWORD_IN_URL.finditer(script)]
    found += [k for k, v in CONTROLLER_CREDENTIALS.items() if v in script]
    return found + ([DB_PASSWORD] if DB_PASSWORD in script else [])


def controller_paths(script: str, built: Built) -> list[str]:
    return [p for p in _paths(built.tmp, REPO, Path.home()) if p in script]


FACTS: dict[str, Callable[[str, Built], list[str]]] = {
    f.__name__: f for f in (interpreter, home, database_url, credential, controller_paths)
}


def _cases() -> Iterator[Any]:
    for scenario in SCENARIOS:
        for fact in FACTS:
            for adapter in ADAPTERS:
                yield pytest.param(adapter, scenario, fact, id=f"{adapter}-{scenario}-{fact}")


@pytest.mark.parametrize(("adapter", "scenario", "fact"), list(_cases()))
def test_the_boot_script_holds_no_controller_fact(
    built: Mapping[str, Built], adapter: str, scenario: str, fact: str
) -> None:
    case = built[scenario]
    script = render(adapter, case.request)
    found = FACTS[fact](script, case)
    assert found == [], f"{adapter}'s boot script for {scenario} holds {fact}: {found}"


def test_the_checks_see_each_fact_they_look_for(built: Mapping[str, Built]) -> None:
    """Each check finds its fact when it is there (so an empty answer above means something)."""
    case = built["embedded-task"]
    planted: Sequence[tuple[str, str]] = (
        ("interpreter", sys.executable),
        ("home", f"export SPOTHOP_HOME={case.home}"),
        ("database_url", "sqlite:////x/spothop.db"),
        ("database_url", "redis://:pw@cache:6379/0"),
        ("credential", AWS_KEY_ID),
        ("credential", "postgresql://u:secret@db/x"),
        ("controller_paths", str(REPO / "src")),
        ("controller_paths", str(Path.home() / ".cache")),
    )
    for fact, text in planted:
        assert FACTS[fact](f"echo {text}\n", case), (fact, text)
    assert database_url(f"echo {SERVER_QUEUE}\n", case) == []
