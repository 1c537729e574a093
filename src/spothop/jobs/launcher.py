"""What an instance of a job runs at boot: the agent, wrapping the job's setup and run.

:func:`bootstrap` turns one attempt (job, node, attempt id, the spec's shell
text) into the instance's bootstrap command and environment::

    python -m spothop.agent run --control-plane <store url> --cloud <provider>
        --job-id <job> [--queue-url <queue>] [--checkpoint-url <url>]
        --restart-limit 0 --state-dir <home>/jobs/<job>/agents/<attempt> --no-probe
        -- sh -c '<driver>' spothop-worker <setup> <run> <conda hook>

Contracts:

- ``setup`` and ``run`` run as SkyPilot runs them: each in ``bash`` (``sh`` only on a node
  without bash, which the log says), in the workdir, in separate invocations, ``setup`` once
  per node (every attempt is a new node) and ``run`` after it. Each has its own exit status:
  an ``exit 0`` ending ``setup`` ends only ``setup``; a ``setup`` that fails ends the worker
  with its status and the log line :data:`SETUP_FAILED_MARK` (``run`` never starts), which
  the agent reports as any failed worker (exit 0 is done, 75 preempted, the rest a failure).
  The texts are the driver's arguments, never spliced into shell code.

- The worker's output (stdout and stderr of setup and run) goes to the instance's own
  file, ``<state-dir>/worker.log`` (:func:`~spothop.wire.logs.worker_log_path`), which the
  agent ships to the control plane in ordered chunks; ``spothop logs`` reads them from the
  store, attempt after attempt, across every recovery. The agent's own output stays with
  the instance (its console).
- ``--restart-limit 0``: the agent does not restart a crashed worker; it exits
  and the controller decides (exit 75: relaunch; 0: the node is done; any
  other: a failure, retried as the spec's ``max_retries`` says).
- The environment carries ``SPOTHOP_JOB_ID``, ``SPOTHOP_NODE_RANK``,
  ``SPOTHOP_ATTEMPT_ID``, ``SPOTHOP_CHECKPOINT_URL`` (when the job has one),
  ``SPOTHOP_OUTPUT_URL`` (a batch job's ``batch.output``),
  ``SPOTHOP_PREEMPTION_RATE_PER_H`` (the λ of the market it was placed in, so
  the checkpoint interval adapts to where the job runs), ``SPOTHOP_CHECKPOINT_INTERVAL_S``
  (a fixed ``checkpoint.interval`` of the spec: it wins over λ),
  ``SPOTHOP_PROVIDER`` and ``SPOTHOP_REGION`` (where the instance is: a restore reads that
  region's replica first), ``SPOTHOP_CHECKPOINT_REPLICAS`` (the spec's ``checkpoint.replicas``
  as JSON, when it names any; :mod:`spothop.checkpoint.replicas`), ``SPOTHOP_GPU`` (the
  offering's GPU) and ``SPOTHOP_CHECKPOINT_COMPAT`` (the spec's
  ``checkpoint.compatibility``; :mod:`spothop.checkpoint.hardware` checks a restore with
  them) and
  ``SPOTHOP_CHECKPOINT_SAVE_COST_S`` (the spec's ``save_cost_s``) when set,
  which :func:`spothop.checkpoint.interval.interval_from_env` reads, and the spec's ``envs``;
  ``SPOTHOP_SECRET_NAMES``, the names of the job's secrets (never their values: the agent
  asks the control plane for those, :meth:`~spothop.wire.contract.ControlPlane.secrets`).
  Only a launch without a control plane URL (the database plane: an executor driven
  in-process on the fake provider, whose instances run nothing) also gets ``SPOTHOP_HOME``,
  the controller's wake address (:data:`spothop.state.wake.WAKE_SOCKET_ENV`) and the
  controller's interpreter; every launch the daemon, a replica or the server makes has an
  ``http(s)://`` control plane and is instance-local (below): none of those facts.
- A grouped task's node (:class:`GroupEnv`, docs/multinode.md) also gets what of the
  rendezvous environment ``torchrun`` expects is known before it boots —
  ``MASTER_PORT`` (:func:`group_port`: one per job and generation),
  ``NODE_RANK``, ``NNODES``, ``NPROC_PER_NODE``, ``WORLD_SIZE`` — and spothop's
  own ``SPOTHOP_NNODES``, ``SPOTHOP_NPROC_PER_NODE``,
  ``SPOTHOP_GROUP_GENERATION`` (:func:`spothop.worker.world` reads them). Not
  ``MASTER_ADDR`` nor ``SKYPILOT_NODE_IPS``: no node has an address yet. Their absence
  tells the node's agent to wait for the group's rendezvous from the control plane
  (:class:`spothop.wire.group.Rendezvous`), which sets them before the worker starts.
- Every node also gets SkyPilot's task variables with spothop's meaning
  (:func:`skypilot_env`): ``SKYPILOT_NODE_RANK``, ``SKYPILOT_NODE_IPS``,
  ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NUM_GPUS_PER_NODE``, ``SKYPILOT_TASK_ID`` (the job's
  id: stable across recoveries), ``SKYPILOT_CLUSTER_INFO``, and for ``setup``
  ``SKYPILOT_SETUP_NODE_RANK`` and ``SKYPILOT_SETUP_NODE_IPS``; they win over a spec's
  ``envs`` of the same name.
- Server mode (the controller runs beside ``spothop server``): ``--control-plane``
  is the server's URL instead of the store's (no database URL, no password, on
  the instance), and the environment carries ``SPOTHOP_CONTROL_PLANE`` and
  ``SPOTHOP_AGENT_TOKEN``, a token the server accepts for this job and this
  instance only (issued per attempt by the executor; never on the command line,
  never logged).
- The HTTP queue: with a control plane URL (``http(s)://``) and a batch job whose
  queue is the embedded database (a ``sqlite``/``postgresql`` URL, which an
  instance cannot open), the worker's ``SPOTHOP_QUEUE_URL`` and the agent's
  ``--queue-url`` are the control plane's URL: the worker reaches its shards
  through it (:class:`spothop.queue.http_backend.HttpQueue`). A ``redis://``
  queue stays direct (:func:`instance_queue_url`).
- ``instance_local`` (an instance that shares nothing with the controller but
  the network): no controller fact on the instance. No ``SPOTHOP_HOME``, no wake
  socket, the agent's state under :data:`INSTANCE_STATE_ROOT` (``/<attempt>``),
  the worker's output in ``<state dir>/worker.log``, and the interpreter plain
  ``python`` (found through the boot script's ``PATH``), and the job's code fetched
  from the control plane (``--code-url``, ``--code-sha256``) into
  :data:`INSTANCE_WORKDIR`, the worker's working folder; the job's ``file_mounts`` are the
  agent's ``--mounts`` (:func:`agent_mounts`), fetched or copied before ``setup``. It needs a control
  plane URL: the database plane's instances share the controller's disk.
- Nothing here launches anything: the executor hands the result to
  ``provider.launch``.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spothop.checkpoint.hardware import COMPAT_ENV, GPU_ENV
from spothop.checkpoint.interval import INTERVAL_ENV, SAVE_COST_ENV
from spothop.checkpoint.interval import RATE_ENV as _RATE_ENV
from spothop.checkpoint.replicas import PROVIDER_ENV, REGION_ENV, REPLICAS_ENV
from spothop.paths import spothop_home
from spothop.state.wake import WAKE_SOCKET_ENV, wake_address
from spothop.wire.contract import SECRET_NAMES_ENV, TOKEN_ENV
from spothop.wire.group import (  # the agent sets them from the rendezvous
    SKYPILOT_NODE_IPS as SKYPILOT_NODE_IPS,
)
from spothop.wire.group import (
    SKYPILOT_NODE_RANK,
    SKYPILOT_NUM_NODES,
    SKYPILOT_SETUP_NODE_RANK,
    shape_env,
)
from spothop.wire.group import SKYPILOT_SETUP_NODE_IPS as SKYPILOT_SETUP_NODE_IPS
from spothop.wire.group import group_port as group_port
from spothop.wire.logs import WORKER_PHASE_NAME, worker_log_path
from spothop.wire.routes import code_url

RATE_ENV = _RATE_ENV  # the same variable the checkpoint library reads
NODE_RANK_ENV = "SPOTHOP_NODE_RANK"
CONTROL_PLANE_ENV = (
    "SPOTHOP_CONTROL_PLANE"  # the agent's --control-plane default (agent/options.py)
)
AGENT_TOKEN_ENV = TOKEN_ENV  # the agent's HTTP bearer token
ATTEMPT_ID_ENV = "SPOTHOP_ATTEMPT_ID"
# SkyPilot's own variables for a task's setup and run (its docs, "SkyPilot environment
# variables"), set with spothop's meaning: see :func:`skypilot_env`.
SKYPILOT_NUM_GPUS_PER_NODE = "SKYPILOT_NUM_GPUS_PER_NODE"
SKYPILOT_TASK_ID = "SKYPILOT_TASK_ID"
SKYPILOT_CLUSTER_INFO = "SKYPILOT_CLUSTER_INFO"
# An instance that shares nothing with the controller: where its agent keeps its state (one folder
# per attempt, on the instance's own disk; the worker's output file is in it) and its interpreter.
INSTANCE_STATE_ROOT = "/var/lib/spothop/agent"
INSTANCE_PYTHON = "python"
INSTANCE_WORKDIR = "/var/lib/spothop/workdir"  # where the agent unpacks the job's code
DATABASE_QUEUE_SCHEMES = ("sqlite", "postgresql", "postgres")


def instance_queue_url(queue_url: str | None, control_plane: str | None) -> str | None:
    """The queue URL an instance is given: the control plane's (an ``http(s)://`` URL) when the
    queue is the embedded database (``sqlite``/``postgresql``), else ``queue_url`` as it is."""
    if not queue_url or not control_plane or not control_plane.startswith(("http:", "https:")):
        return queue_url
    scheme = queue_url.split(":", 1)[0].split("+", 1)[0].lower()
    return control_plane.rstrip("/") if scheme in DATABASE_QUEUE_SCHEMES else queue_url


@dataclass(frozen=True)
class GroupEnv:
    """The shape of a grouped task's generation, as one node's launch gives it: all of its
    rendezvous but the nodes' addresses, which the agent waits for (module docstring)."""

    nnodes: int
    nproc_per_node: int
    generation: int
    master_port: int

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def env(self, node: int) -> dict[str, str]:
        """Node ``node``'s variables: torchrun's names, spothop's own and SkyPilot's shape."""
        return shape_env(
            node=node,
            nnodes=self.nnodes,
            nproc_per_node=self.nproc_per_node,
            generation=self.generation,
            master_port=self.master_port,
        )


def skypilot_env(
    *,
    job_id: str,
    node: int,
    provider: str,
    region: str | None,
    zone: str | None,
    group: GroupEnv | None,
    gpu_count: int | None,
) -> dict[str, str]:
    """SkyPilot's task variables, with spothop's meaning, for node ``node`` of ``job_id``.

    - ``SKYPILOT_NODE_RANK`` (and ``SKYPILOT_SETUP_NODE_RANK``): the node's rank in its
      group's current generation (0 for a single node).
    - ``SKYPILOT_NUM_NODES``: the nodes of the current generation (1 for a single node).
    - ``SKYPILOT_NODE_IPS`` (and ``SKYPILOT_SETUP_NODE_IPS``): one address a line, node 0
      first. Not known before the nodes boot: a group's agent sets them from the group's
      rendezvous (:class:`spothop.wire.group.Rendezvous`), and a single node's own address is
      filled in by the worker's driver on the node (:data:`_DRIVER`).
    - ``SKYPILOT_NUM_GPUS_PER_NODE``: the offering's GPU count when the launch names it, a
      group's processes per node, else counted on the node (``nvidia-smi``; 0 without).
    - ``SKYPILOT_TASK_ID``: the job's id, the same across every recovery (as a SkyPilot
      managed job's task id).
    - ``SKYPILOT_CLUSTER_INFO``: JSON ``{cluster_name, cloud, region, zone}``: the job's id,
      the provider and where this attempt runs (null where not known).
    """
    env = {
        SKYPILOT_NODE_RANK: str(node),
        SKYPILOT_SETUP_NODE_RANK: str(node),
        SKYPILOT_NUM_NODES: str(group.nnodes if group is not None else 1),
        SKYPILOT_TASK_ID: job_id,
        SKYPILOT_CLUSTER_INFO: json.dumps(
            {"cluster_name": job_id, "cloud": provider, "region": region, "zone": zone}
        ),
    }
    gpus = gpu_count if gpu_count is not None else group.nproc_per_node if group else None
    if gpus is not None:
        env[SKYPILOT_NUM_GPUS_PER_NODE] = str(gpus)
    return env


@dataclass(frozen=True)
class WorkerCommand:
    """The shell text of a job and where it runs (from the job spec)."""

    run: str
    setup: str | None = None
    workdir: str | None = None
    envs: Mapping[str, str] = field(default_factory=dict)
    secret_names: tuple[str, ...] = ()  # the agent fetches their values (never in the launch)
    checkpoint_url: str | None = None
    queue_url: str | None = None  # batch jobs: the shard queue the workers pull from
    output_url: str | None = None  # batch jobs: the spec's batch.output
    checkpoint_interval_s: float | None = None  # the spec's fixed interval; None: auto (from λ)
    checkpoint_save_cost_s: float | None = None  # the spec's first guess at one save's seconds
    checkpoint_replicas: Mapping[str, str] = field(default_factory=dict)  # region → durable URL
    checkpoint_compat: Mapping[str, Any] | None = None  # checkpoint.compatibility (None: not asked)


@dataclass(frozen=True)
class Bootstrap:
    command: tuple[str, ...]
    env: dict[str, str]
    log_path: Path


def job_dir(job_id: str, home: Path | None = None) -> Path:
    """``<home>/jobs/<job_id>``: the job's logs and its agents' state folders."""
    return (home or spothop_home()) / "jobs" / job_id


# The worker: a POSIX ``sh`` driver (every image has ``sh``) that sends the output to the
# attempt's log, then runs ``setup`` and ``run`` each in a ``bash`` of its own, as SkyPilot runs
# them. Separate invocations, so an ``exit 0`` ending ``setup`` ends only ``setup``, and each has
# its own exit status: a failed ``setup`` ends the attempt with that status and ``run`` never
# starts. The texts arrive as the driver's arguments ($1 setup, $2 run), never spliced into it.
# Before each phase the driver writes its name beside the log (``worker.phase``): the agent
# reads it when the worker exits, so a failed setup is reported as one ("setup failed (exit N)").
# A setup that succeeded leaves ``worker.phase.setup-done``: a worker the agent restarts on the
# same node runs only ``run`` again (setup once per node, as SkyPilot runs it).
# Each phase loads conda's shell functions first when the node has conda (as SkyPilot does), so
# ``conda activate`` works.
_CONDA_HOOK = (
    "if command -v conda >/dev/null 2>&1; then "
    '. "$(conda info --base 2>/dev/null)/etc/profile.d/conda.sh" >/dev/null 2>&1 || true; fi\n'
)
_DRIVER = """\
if [ -z "$SKYPILOT_NODE_IPS" ]; then
  ip=$(hostname -I 2>/dev/null | cut -d' ' -f1); [ -n "$ip" ] || ip=127.0.0.1
  SKYPILOT_NODE_IPS=$ip; SKYPILOT_SETUP_NODE_IPS=$ip; export SKYPILOT_NODE_IPS SKYPILOT_SETUP_NODE_IPS
fi
if [ -z "$SKYPILOT_NUM_GPUS_PER_NODE" ]; then
  SKYPILOT_NUM_GPUS_PER_NODE=$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU')
  export SKYPILOT_NUM_GPUS_PER_NODE
fi
if command -v bash >/dev/null 2>&1; then shell=bash
else shell=sh; echo "spothop: this node has no bash; setup and run use sh" >&2; fi
if [ -n "$1" ] && [ ! -e "$phase.setup-done" ]; then
  printf setup >"$phase" 2>/dev/null
  "$shell" -c "$3$1" spothop-setup
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "spothop: setup failed with exit status $status; run was not started" >&2
    exit "$status"
  fi
  : >"$phase.setup-done" 2>/dev/null
fi
printf run >"$phase" 2>/dev/null
exec "$shell" -c "$3$2" spothop-run"""
SETUP_FAILED_MARK = "spothop: setup failed with exit status"  # the log line a failed setup leaves


def worker_script(work: WorkerCommand, log_path: Path) -> str:
    """The ``sh -c`` driver: output to the attempt's log, ``cd workdir``, then ``setup`` and
    ``run`` each in ``bash`` (:func:`worker_command` gives them as its arguments)."""
    phase = log_path.parent / WORKER_PHASE_NAME
    parts = [f"exec >>{shlex.quote(str(log_path))} 2>&1", f"phase={shlex.quote(str(phase))}"]
    if work.workdir:
        parts.append(f"cd {shlex.quote(work.workdir)} || exit")
    parts.append(_DRIVER)
    return "\n".join(parts)


def worker_command(work: WorkerCommand, log_path: Path) -> tuple[str, ...]:
    """The worker's argv: ``sh -c DRIVER spothop-worker SETUP RUN HOOK`` (see :data:`_DRIVER`)."""
    setup = work.setup if work.setup and work.setup.strip() else ""
    return (
        "sh",
        "-c",
        worker_script(work, log_path),
        "spothop-worker",
        setup,
        work.run,
        _CONDA_HOOK,
    )


def placement_env(
    work: WorkerCommand, provider: str, region: str | None, gpu: str | None
) -> dict[str, str]:
    """Where the attempt runs and what its checkpoints may read and must fit: provider, region,
    GPU, the spec's replicas and its compatibility need (those set)."""
    env = {PROVIDER_ENV: provider}
    if region:
        env[REGION_ENV] = region
    if gpu:
        env[GPU_ENV] = gpu
    if work.checkpoint_compat is not None:  # the job opted in ({}: the matrix's own rules)
        compat = {k: v for k, v in work.checkpoint_compat.items() if v is not None}
        env[COMPAT_ENV] = json.dumps(compat, sort_keys=True)
    if work.checkpoint_replicas:
        env[REPLICAS_ENV] = json.dumps(dict(work.checkpoint_replicas), sort_keys=True)
    return env


def _number(value: float | None) -> str | None:
    return None if value is None else repr(float(value))


def agent_mounts(mounts_json: str, control_plane: str | None, workdir: str | None) -> str:
    """The agent's ``--mounts`` (JSON, a list in the spec's order; :mod:`spothop.agent.mounts`)
    for a job's planned mounts (``jobs.mounts_json``):

    - an upload: ``{"dest", "fetch": URL, "sha256", "file"}``, the URL the control plane's code
      route (``{instance_id}`` left for the agent), when ``control_plane`` (an instance-local
      launch) is given; without one (the database plane's instances share the controller's
      disk) ``{"dest", "copy": SOURCE}``, a relative ``dest`` made the ``workdir``'s;
    - a bucket URL or bucket path: ``{"dest", "copy": SOURCE}``.
    """
    out: list[dict[str, Any]] = []
    for mount in json.loads(mounts_json):
        dest = str(mount["dest"])
        if control_plane is None and workdir and not dest.startswith(("/", "~")):
            dest = str(Path(workdir) / dest)
        if "sha256" not in mount:
            out.append({"dest": dest, "copy": mount["copy"]})
        elif control_plane is None:
            out.append({"dest": dest, "copy": mount["source"]})
        else:
            url = code_url(control_plane, mount["sha256"])
            out.append(
                {"dest": dest, "fetch": url, "sha256": mount["sha256"], "file": mount["file"]}
            )
    return json.dumps(out, separators=(",", ":"))


def _agent_paths(
    job_id: str, attempt_id: str, home: Path, python: str, local_plane: str | None
) -> tuple[Path, str]:
    """(the agent's state dir, the interpreter): the instance's own when ``local_plane`` (an
    instance-local launch's control plane URL) is given, else the controller's home's and
    ``python``."""
    if local_plane is not None:
        if not local_plane.startswith(("http:", "https:")):
            raise ValueError("instance_local needs an http(s):// control plane URL")
        return Path(INSTANCE_STATE_ROOT) / attempt_id, INSTANCE_PYTHON
    return job_dir(job_id, home) / "agents" / attempt_id, python


def bootstrap(
    work: WorkerCommand,
    *,
    job_id: str,
    node: int,
    attempt_id: str,
    provider: str,
    store_url: str,
    preemption_rate_per_h: float | None = None,
    home: Path | None = None,
    python: str = sys.executable,
    group: GroupEnv | None = None,
    region: str | None = None,
    wake_socket: str | None = None,
    gpu: str | None = None,
    control_plane: str | None = None,
    agent_token: str | None = None,
    zone: str | None = None,
    gpu_count: int | None = None,
    instance_local: bool = False,
    code_sha256: str | None = None,
    mounts_json: str | None = None,
) -> Bootstrap:
    """The bootstrap command and environment of one attempt (see the module docstring).

    ``zone`` and ``gpu_count`` (the offering's GPUs per node) go to SkyPilot's variables
    (:func:`skypilot_env`); left None, the cluster info's zone is null and the node counts
    its GPUs itself.

    ``control_plane``: the server's URL when the agents talk to ``spothop server``
    (server mode; default the store itself), with ``agent_token``, the instance's own
    token, in the environment only (``ps`` shows a command line). A batch job's database
    queue is then reached through it (:func:`instance_queue_url`).

    ``instance_local`` (with an ``http(s)://`` ``control_plane`` only): the instance's own paths
    and interpreter, no controller fact (module docstring). With ``code_sha256`` (the job's
    packed workdir, stored by the control plane) the agent fetches the code from the control
    plane and unpacks it into :data:`INSTANCE_WORKDIR`, the worker's working folder: the spec's
    ``workdir`` is the controller's folder, never named on the instance.

    ``mounts_json``: the job's planned ``file_mounts`` (:mod:`spothop.controlplane.mounts`),
    given to the agent as ``--mounts`` (:func:`agent_mounts`).
    """
    home = home or spothop_home()
    queue_url = instance_queue_url(work.queue_url, control_plane)
    state_dir, python = _agent_paths(
        job_id, attempt_id, home, python, (control_plane or "") if instance_local else None
    )
    log_path = worker_log_path(state_dir)  # instance-local: the agent ships it
    command = [python, "-m", "spothop.agent", "run", "--control-plane", control_plane or store_url]
    command += ["--cloud", provider, "--job-id", job_id, "--restart-limit", "0"]
    command += ["--state-dir", str(state_dir), "--no-probe"]
    if queue_url:
        command += ["--queue-url", queue_url]
    if work.checkpoint_url:
        command += ["--checkpoint-url", work.checkpoint_url]
    if instance_local:
        if code_sha256:
            command += ["--code-url", code_url(control_plane or "", code_sha256)]
            command += ["--code-sha256", code_sha256, "--workdir", INSTANCE_WORKDIR]
        work = replace(work, workdir=None)  # the agent's --workdir, or the instance's own cwd
    if mounts_json:
        mounts = agent_mounts(mounts_json, control_plane if instance_local else None, work.workdir)
        command += ["--mounts", mounts]
    command += ["--", *worker_command(work, log_path)]
    env = {str(k): str(v) for k, v in work.envs.items()}
    if not instance_local:  # the database plane's instances share the controller's disk
        env.update({"SPOTHOP_HOME": str(home), WAKE_SOCKET_ENV: wake_socket or wake_address(home)})
    env.update(
        {
            "SPOTHOP_JOB_ID": job_id,
            NODE_RANK_ENV: str(node),
            ATTEMPT_ID_ENV: attempt_id,
            **placement_env(work, provider, region, gpu),
        }
    )
    optional = {
        "SPOTHOP_CHECKPOINT_URL": work.checkpoint_url or None,
        "SPOTHOP_QUEUE_URL": queue_url or None,
        "SPOTHOP_OUTPUT_URL": work.output_url or None,
        INTERVAL_ENV: _number(work.checkpoint_interval_s),
        SAVE_COST_ENV: _number(work.checkpoint_save_cost_s),
        RATE_ENV: _number(preemption_rate_per_h),
        CONTROL_PLANE_ENV: control_plane or None,
        AGENT_TOKEN_ENV: agent_token or None,
        SECRET_NAMES_ENV: ",".join(work.secret_names) or None,  # names only
    }
    env.update({k: v for k, v in optional.items() if v is not None})
    if group is not None:
        env.update(group.env(node))
    env.update(
        skypilot_env(
            job_id=job_id,
            node=node,
            provider=provider,
            region=region,
            zone=zone,
            group=group,
            gpu_count=gpu_count,
        )
    )
    return Bootstrap(tuple(command), env, log_path)
