"""The steps of a launch, each a point where a test can stop the controller as SIGKILL would.

A launch writes ahead, so a controller killed anywhere in it leaves the next one what it needs
(docs/controller.md, "A controller killed mid-launch"). The steps, in order
(:data:`LAUNCH_STEPS`), and what the next controller finds after a kill there:

1. ``attempt_written``: the attempt row (``launching``, its launch token), before anything
   else. No instance carries the token: the attempt ends ``launch_failed`` (cut short) and the
   node is launched again, once.
2. ``request_built``: the launch request made; in server mode its agent's token issued for the
   launch token. The same as 1; the token goes with its attempt.
3. ``provider_called``: the cloud's launch call returned: an instance exists, tagged with the
   launch token, its id not stored. It is adopted by its token, not launched again. Its agent
   is not held up meanwhile: its token binds to it on first use (``TokenStore.bind_on_first_use``).
4. ``token_bound``: server mode: the agent's token bound to the instance. The same as 3.
5. ``instance_recorded``: the instance's id stored on the attempt (``pending``). Adopted.
6. ``running``: the attempt recorded ``running``. Adopted.

:func:`reached` marks each. Inert unless a test asks: in this process through :func:`set_hook`
(the hook raises to stop the controller where it stands), or in a controller process it starts,
through ``SPOTHOP_TEST_KILL_AT=STEP``, which SIGKILLs the process there.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

KILL_AT_ENV = "SPOTHOP_TEST_KILL_AT"
LAUNCH_STEPS = (
    "attempt_written",
    "request_built",
    "provider_called",
    "token_bound",
    "instance_recorded",
    "running",
)

_hook: Callable[[str], None] | None = None


def set_hook(hook: Callable[[str], None] | None) -> None:
    """Call ``hook(step)`` at each step from now on (None: no more); tests only."""
    global _hook
    _hook = hook


def reached(step: str) -> None:
    """The launch reached ``step`` (one of :data:`LAUNCH_STEPS`)."""
    if _hook is not None:
        _hook(step)
    elif os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
