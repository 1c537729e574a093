"""Where the control plane serves what an instance fetches: spothop's wheel and the job's code.

The serving side (:mod:`spothop.server.agent_files`) and the side that writes the URLs into a
launch (:mod:`spothop.jobs.controller.launch_request`, :mod:`spothop.controlplane.dist`,
:mod:`spothop.controlplane.archives`) read them here, once. Standard library only.
"""

from __future__ import annotations

# + "/{sha256}/{filename}": a spothop wheel the control plane built, by its content (a launch's
# URL keeps naming the bytes it was given when the control plane's code changes meanwhile)
DIST_ROUTE = "/v1/dist"
CODE_ROUTE = "/v1/agents/{instance_id}/code/{sha256}"  # a job's packed workdir (agent token)


def dist_url(base_url: str, sha256: str, filename: str) -> str:
    """The wheel ``filename`` whose bytes hash to ``sha256``, at the control plane ``base_url``."""
    return f"{base_url.rstrip('/')}{DIST_ROUTE}/{sha256}/{filename}"


def code_url(base_url: str, sha256: str) -> str:
    """The agent's ``--code-url`` for a control plane's base URL (``{instance_id}`` left for the
    agent to fill in: the command is written before the instance has an id)."""
    return base_url.rstrip("/") + CODE_ROUTE.replace("{sha256}", sha256)
