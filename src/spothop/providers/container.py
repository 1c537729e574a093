"""Running a job's worker inside a container image while the agent stays on the host.

A launch with ``image`` (:class:`~spothop.providers.base.LaunchRequest`) keeps
its bootstrap command's shape — ``AGENT… -- WORKER…`` — and replaces only the
worker part (everything after the first ``--``) with :func:`in_container`'s
``sh -c 'exec docker run … IMAGE "$@"' spothop-container WORKER…``. So:

- the agent runs on the host, where it reads the metadata service and sees
  the interruption notices; it supervises ``docker run`` as it would the
  worker (``docker run`` passes its signals on to the container, whose
  ``--init`` passes them to the worker);
- the container gets every GPU (``--gpus all``: the host needs the NVIDIA
  container toolkit), the host's network and IPC (``--network host --ipc
  host``: the control plane, the queue and NCCL as on the host);
- the agent's control folder (``$SPOTHOP_AGENT_DIR``) and ``$SPOTHOP_HOME``
  (when set) are mounted at the same paths, so the worker SDK's files reach
  the agent and the attempt's log lands where ``spothop logs`` reads it;
- the environment is passed by name (``-e NAME``, values never on a command
  line): the launch's ``env``, the variables the agent gives its worker
  (:data:`WORKER_VARIABLES`) and the caller's ``extra`` names; never the
  agent's control-plane token (:data:`NEVER_PASSED`). A name the host does
  not set is not set in the container either.

The image must hold what ``setup`` and ``run`` need (and spothop, for the
worker SDK); the job's ``workdir`` must be inside it or under ``$SPOTHOP_HOME``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence

from spothop.errors import ConfigError

# What the agent sets for its worker (spothop.worker.channel; named here, a layer below it).
WORKER_VARIABLES = (
    "SPOTHOP_AGENT_DIR",
    "SPOTHOP_WORKER_ID",
    "SPOTHOP_INSTANCE_ID",
    "SPOTHOP_JOB_ID",
    "SPOTHOP_QUEUE_URL",
    "SPOTHOP_CHECKPOINT_URL",
)
NEVER_PASSED = frozenset({"SPOTHOP_AGENT_TOKEN"})  # the agent's credential, not the job's code's
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,499}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DOCKER_CHECK = (
    "command -v docker >/dev/null 2>&1 || {{ echo 'spothop: the job runs in image {image}, "
    "but this host has no docker; use a machine image with docker and the NVIDIA container "
    "toolkit' >&2; exit 1; }}"
)


def in_container(
    command: Sequence[str], image: str, env_names: Iterable[str], extra: Iterable[str] = ()
) -> tuple[str, ...]:
    """``command`` with its worker part (after ``--``) run in ``image`` (see the module docstring).

    ConfigError if ``image`` is not an image reference or ``command`` has no ``--`` with a
    worker after it.
    """
    if not _IMAGE.fullmatch(image):
        raise ConfigError(
            f"image {image!r} is not a container image reference; write it as docker pulls it, "
            "e.g. nvcr.io/nvidia/pytorch:24.05-py3"
        )
    parts = list(command)
    if "--" not in parts or parts.index("--") == len(parts) - 1:
        raise ConfigError(
            "a launch with an image needs a bootstrap command of the form 'AGENT… -- WORKER…' "
            "(the worker is what runs in the container); this one has no worker after '--'"
        )
    cut = parts.index("--")
    names = sorted(
        {n for n in (*env_names, *WORKER_VARIABLES, *extra) if _NAME.fullmatch(n)} - NEVER_PASSED
    )
    docker = [
        "exec docker run --rm --init --gpus all --network host --ipc host",
        '-v "$SPOTHOP_AGENT_DIR:$SPOTHOP_AGENT_DIR"',
        '${SPOTHOP_HOME:+-v "$SPOTHOP_HOME:$SPOTHOP_HOME"}',
        *(f"-e {name}" for name in names),
        shlex.quote(image),
        '"$@"',
    ]
    return (*parts[: cut + 1], "sh", "-c", " ".join(docker), "spothop-container", *parts[cut + 1 :])


def docker_check(image: str) -> str:
    """A boot-script line that stops the boot, loudly, when the host has no docker for ``image``."""
    return DOCKER_CHECK.format(image=image)
