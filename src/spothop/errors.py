"""spothop's exceptions: one root, one tree.

Every error spothop raises on purpose is a :class:`SpothopError`. The command
line prints its message (which names what was wrong and how to fix it) and
exits with the error's ``exit_code``, never a traceback. Each class below sets
its code (``exit_code``, drawn at the right of the tree); a subclass inherits
its parent's unless it says otherwise. The codes are the same for every
command (``docs/cli.md``):

====  ==========================  ================================================
code  name                        meaning
====  ==========================  ================================================
0     ``EXIT_OK``                 the command did what was asked
1     ``EXIT_FAILED``             it ran, and the answer is no (a checksum failed, a cloud refused, every shard failed)
2     ``EXIT_BAD_INPUT``          the input is wrong: a flag, a file, a spec, a value out of range, credentials
3     ``EXIT_NOT_FOUND``          what was named does not exist (a path, a job, an instance, a checkpoint)
4     ``EXIT_UNAVAILABLE``        a service or capacity it needs is not there now (database, queue, metadata
                                  endpoint, cloud API throttling, no spot capacity); the same call may succeed later
5     ``EXIT_PARTIAL``            some of the work failed (shards failed, rows refused); the rest was done
75    ``EXIT_PREEMPTED``          the agent: preempted, resumable
130   ``EXIT_INTERRUPTED``        Ctrl-C
====  ==========================  ================================================

::

    SpothopError
    ├── ConfigError                 bad input from the user: a flag, a file, a spec                exit 2
    │   ├── UnknownGpuError         a GPU name no alias matches (carries suggestions)
    │   ├── CurrencyError           a currency with no rate, or a malformed rate table
    │   ├── TraceError              a market trace that is missing or of the wrong shape
    │   │   └── TraceNotFound       the trace or price file named does not exist (exit 3)
    │   ├── CheckpointConfigError   a bad checkpointer setting, URL, or a state value that cannot be stored
    │   ├── UnknownJobError         no queue (job) of that name was ever created (exit 3, also a NotFoundError)
    │   ├── MalformedShardError     a shard id or payload that cannot be stored or read back
    │   ├── BatchSpecError          a batch job spec that does not validate (names the field)
    │   ├── JobSpecError            a job spec that does not validate: field path, value, what was expected
    │   │   └── StorageUnreachable  a checkpoint or output URL that cannot be written, found before launch
    │   ├── AgentConfigError        a bad agent option: unknown protocol, bad hook spec
    │   ├── ValueOutOfRange         a number that is not finite or not in its field's range
    │   ├── NoCandidates            no offering meets the job's requirements (names the one that excluded most)
    │   ├── WorldConfigError        a multi-node group's environment that does not hold together
    │   ├── SimulationError         a simulation that cannot go on: a policy that never finishes, a window past its traces
    │   └── CatalogError            a catalog file that cannot be read at all
    │       └── CatalogRowError     one malformed row: file, line, field, reason
    ├── NotFoundError               what was named does not exist (a path, a job, a checkpoint)     exit 3
    │   ├── JobNotFound             no job with that id in the job store (spothop.jobs.errors)
    │   │   └── UnknownJob          the same, for a report: lists the nearest ids (spothop.observe.job_report)
    │   └── AttemptNotFound         no instance attempt with that id
    ├── IllegalTransition           a job or attempt state change the lifecycle table refuses       exit 1
    ├── JobChanged                  a job written by someone else since the version the writer read exit 1
    ├── JobLeaseLost                a write under a controller's job lease that no longer holds     exit 1
    ├── JobFinished                 asked of a job in a final state (cancel a finished job)         exit 1
    ├── StoreTooNew                 the store's schema was upgraded by a newer spothop than this    exit 1
    ├── StoreUnwritable             the store's disk is full or read-only: nothing saved was lost   exit 4
    ├── CodeArchiveDamaged          an uploaded code archive the store holds cannot be read back as itself exit 1
    ├── NoCapacityNow               offerings fit, but none has a price or capacity there now      exit 4
    ├── ControllerRunning           another controller holds this home's lock                       exit 1
    ├── ControllerStartFailed       the background controller exited before it took its lock        exit 1
    ├── AgentApiStartFailed         the controller's agent API process did not start or answer      exit 1
    ├── TopologyParseError          nvidia-smi output that cannot be understood                     exit 2
    ├── QueueError                  the shard queue refused an operation                           exit 1
    │   ├── UnknownLeaseError       a lease for a shard the job does not have                     exit 3
    │   ├── LeaseLost               the lease expired or another worker holds the shard now
    │   ├── AlreadyCompletedError   a second complete of one lease with a different output
    │   └── QueueUnavailableError   the backend stayed unreachable through every retry             exit 4
    ├── ServerError                 spothop server refused a call or did not answer (cli/remote.py)
    │   ├── ServerUnavailable       unreachable, timed out, 429 or 5xx: may work later            exit 4
    │   ├── ServerAuthError         401: no token, or one the server does not know                exit 2
    │   ├── ServerForbidden         403: a valid token that may not touch that                     exit 2
    │   ├── ServerNotFound          404 (also a NotFoundError)                                     exit 3
    │   ├── ServerConflict          409: does not fit the object's state                           exit 1
    │   └── ServerRefused           400/413/422: the input is wrong (also a ConfigError)           exit 2
    ├── AgentError                  the on-instance agent failed at something on purpose           exit 1
    │   ├── NoticeEndpointError     the metadata endpoint was unreachable or gave a bad answer     exit 4
    │   │   └── EndpointTimeout     no answer within the timeout (the request or its answer was lost)
    │   ├── EventFormatError        a stored or received agent event is not an event               exit 1
    │   ├── StoreRefused            the store process answered with the store's or queue's error   exit 1
    │   ├── LogOffsetGap            a log chunk past the stored end: resend from the end it names  exit 1
    │   └── ControlPlaneError       the control plane refused a call or did not answer             exit 4
    │       └── ControlPlaneAuthError   it refused the agent's token (HTTP 401/403)                exit 2
    ├── CheckpointError             a checkpoint could not be written, read or trusted             exit 1
    │   ├── CheckpointWriteError    location unwritable or full, or an upload failed; earlier ones untouched
    │   ├── CheckpointCorrupt       checksum or size mismatch, truncated file, damaged manifest
    │   │   └── ParentMissing       a delta whose parent is gone or does not verify
    │   ├── FormatVersionError      a manifest from a newer format version
    │   ├── NoValidCheckpoint       checkpoints exist but none restores; carries each reason
    │   ├── ReshardError            another world size's checkpoint that cannot be re-sharded to this one
    │   └── ValidationFailed        the validation hook rejected a restored checkpoint
    └── ProviderError               a cloud refused or failed; keeps its own code and message     exit 1
        ├── CapacityUnavailable     no spot (or on-demand) capacity of that type there now         exit 4
        ├── QuotaExceeded           the account's limit for that type or region is reached         exit 1
        ├── AuthFailed              credentials missing, expired or without permission             exit 2
        ├── RateLimited             too many API calls; ``retry_after_s`` when the cloud says      exit 4
        ├── PriceTooLow             the spot bid (max price) is below the market price             exit 1
        ├── InvalidRequest          the cloud calls the request malformed (a type not sold there)  exit 2
        └── InstanceNotFound        no instance with that id (terminate treats this as done)       exit 3
"""

from __future__ import annotations

from collections.abc import Sequence

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_PARTIAL = 5
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: the agent was preempted; the work is resumable
EXIT_INTERRUPTED = 130


class SpothopError(Exception):
    """Root of every error spothop raises on purpose."""

    exit_code: int = EXIT_FAILED


class ConfigError(SpothopError):
    """The user's input (a flag, a file, a job spec) is wrong; the message says how."""

    exit_code = EXIT_BAD_INPUT


class ValueOutOfRange(ConfigError, ValueError):
    """A number that is not finite or outside its field's range; names the field, the value and the range.

    Also a ``ValueError``, so that a pydantic validator raising it (``Bound.annotated``)
    becomes a validation error at the field's place in the file (``clouds.0.speed``).
    """

    def __init__(self, field: str, value: object, requirement: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field} {requirement}, got {value!r}")


class NotFoundError(SpothopError):
    """What was named (a path, a job, a checkpoint, an instance) does not exist."""

    exit_code = EXIT_NOT_FOUND


class StoreUnwritable(SpothopError):
    """The store cannot take a write: its disk is full, or read-only (a file system mounted so,
    a file this user may not write, a PostgreSQL standby). The message names the store and the
    fix. The write that failed was rolled back whole, and nothing the store already held is
    lost: the same command succeeds once the disk has room or is writable again."""

    exit_code = EXIT_UNAVAILABLE


class StoreTooNew(SpothopError):
    """The store is at a schema revision this code does not know: a newer spothop upgraded it.

    Nothing is changed: opening it with older code could lose what the newer
    schema holds. The fix is to upgrade spothop (or to point at another store).
    """

    exit_code = EXIT_FAILED

    def __init__(self, url: str, store_revision: str, code_revision: str) -> None:
        self.url = url
        self.store_revision = store_revision
        self.code_revision = code_revision
        super().__init__(
            f"the store at {url} is at schema revision {store_revision}, newer than this spothop knows"
            f" (its newest is {code_revision}): a newer spothop upgraded it. Upgrade spothop"
            " (pip install -U spothop) to open it, or point --url / SPOTHOP_DATABASE_URL at another store"
        )


class UnknownGpuError(ConfigError):
    """No GPU model matches a name; ``suggestions`` holds the closest known names."""

    def __init__(self, name: str, suggestions: Sequence[str] = ()) -> None:
        self.name = name
        self.suggestions = list(suggestions)
        hint = (
            f"; did you mean {', '.join(repr(s) for s in self.suggestions)}?" if suggestions else ""
        )
        if name.strip().lower().startswith("tpu"):  # SkyPilot's tpu-v4-8 and the like
            super().__init__(
                f"{name!r} is a TPU: spothop runs GPU instances only (TPUs are out of scope); "
                "name a GPU (`spothop gpus` lists every known model and alias)"
            )
            return
        super().__init__(
            f"unknown GPU {name!r}{hint} (`spothop gpus` lists every known model and alias)"
        )


class JobSpecError(ConfigError):
    """A job spec (``spothop launch FILE``) that does not validate.

    ``problems`` holds one ``(field path, message)`` per fault, such as
    ``("resources.accelerators", "unknown GPU 'A10X'; did you mean 'A10G'? ...")``;
    the message joins them, prefixed with the file.
    """

    def __init__(self, message: str, problems: Sequence[tuple[str, str]] = ()) -> None:
        self.problems = list(problems)
        super().__init__(message)


class StorageUnreachable(JobSpecError):
    """A job's checkpoint or output URL cannot be written (probed before anything is paid for)."""


class CurrencyError(ConfigError):
    """A price is in a currency the rate table does not know, or the table is malformed."""


class CatalogError(ConfigError):
    """A catalog file cannot be read at all (missing, wrong format, no header)."""


class CatalogRowError(CatalogError):
    """One catalog row is malformed, or (``out_of_scope``) well formed but not a GPU
    offering spothop keeps, such as a CPU-only type. The other rows of the file still load."""

    def __init__(
        self, path: str, line: int, field: str | None, reason: str, *, out_of_scope: bool = False
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason
        self.out_of_scope = out_of_scope
        where = f"{path}:{line}" + (f" field {field!r}" if field else "")
        super().__init__(f"{where}: {reason}")


class TopologyParseError(SpothopError):
    """``nvidia-smi`` output that does not parse; the message names the line."""

    exit_code = EXIT_BAD_INPUT


class ProviderError(SpothopError):
    """A cloud refused or failed a call. ``code`` and ``cloud_message`` are the cloud's own.

    ``provider`` names the adapter; ``code`` is the cloud's error code as it
    spells it (``InsufficientInstanceCapacity``, ``ZONE_RESOURCE_POOL_EXHAUSTED``,
    ``SkuNotAvailable``), so that a user can look it up in the cloud's docs.

    ``region_scoped``: the error holds in the region the call was made in, not
    across the provider (a region the account has not enabled, an image id that
    exists in another region): the same request may succeed in its other
    regions. Set by the cloud's code table (:mod:`spothop.providers.retry`).
    """

    region_scoped: bool = False

    def __init__(self, provider: str, code: str, cloud_message: str, hint: str = "") -> None:
        self.provider = provider
        self.code = code
        self.cloud_message = cloud_message
        text = f"{provider}: {code}: {cloud_message}"
        super().__init__(f"{text} ({hint})" if hint else text)


class CapacityUnavailable(ProviderError):
    """No capacity of the requested type in that place right now; try another zone or type."""

    exit_code = EXIT_UNAVAILABLE  # the same launch may succeed later or elsewhere


class QuotaExceeded(ProviderError):
    """The account's quota for that type or region is used up; ask the cloud for more."""


class AuthFailed(ProviderError):
    """Credentials are missing, expired, or lack a permission."""

    exit_code = EXIT_BAD_INPUT  # the user fixes their configuration; retrying as is cannot help


class RateLimited(ProviderError):
    """The cloud throttled the call; retry after ``retry_after_s`` when it says."""

    exit_code = EXIT_UNAVAILABLE

    def __init__(
        self, provider: str, code: str, cloud_message: str, retry_after_s: float | None = None
    ) -> None:
        super().__init__(provider, code, cloud_message)
        self.retry_after_s = retry_after_s


class PriceTooLow(ProviderError):
    """The maximum spot price asked for is below the current market price."""


class InvalidRequest(ProviderError):
    """The cloud refused the request itself (``InvalidParameterValue``): a type it does not sell there,
    a parameter out of its range. The same request fails again; the user changes it."""

    exit_code = EXIT_BAD_INPUT


class InstanceNotFound(ProviderError, NotFoundError):
    """No instance with that id. ``terminate`` treats it as already done."""

    exit_code = EXIT_NOT_FOUND


def exit_for_counts(done: int, failed: int) -> int:
    """The exit status of a command that did ``done`` items and could not do ``failed``:
    :data:`EXIT_OK` when nothing failed, :data:`EXIT_FAILED` when nothing was done
    either, else :data:`EXIT_PARTIAL`."""
    if failed <= 0:
        return EXIT_OK
    return EXIT_PARTIAL if done > 0 else EXIT_FAILED


# --- the CLI's client of ``spothop server`` (cli/remote.py) -------------------------------------


class ServerError(SpothopError):
    """``spothop server`` refused a call or did not answer; the message says which and why."""

    def __init__(self, message: str, *, status: int | None = None, kind: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind  # the server's error type (``JobNotFound``, ``JobSpecError``…)


class ServerUnavailable(ServerError):
    """Unreachable, timed out, rate limited (429) or a server error (5xx): the same call may work later."""

    exit_code = EXIT_UNAVAILABLE
    refused = False  # the connection was refused: the request never reached a server
    retry_after_s: float | None = None  # the server's Retry-After, when it gave one


class ServerAuthError(ServerError):
    """401: no token, or one the server does not know (or revoked)."""

    exit_code = EXIT_BAD_INPUT


class ServerForbidden(ServerError):
    """403: the token is valid but may not touch that (another project's job)."""

    exit_code = EXIT_BAD_INPUT


class ServerNotFound(ServerError, NotFoundError):
    """404: no such job (or path) on the server."""


class ServerConflict(ServerError):
    """409: the request does not fit the object's state (cancel a finished job)."""

    exit_code = EXIT_FAILED


class ServerRefused(ServerError, ConfigError):
    """400/413/422: the input is wrong (a spec, a flag's value, a body too big)."""
