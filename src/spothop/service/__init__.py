"""What both fronts do, built once: the CLI prints it, ``spothop server`` returns it.

Each service takes the store (or the catalog, or a spec) and typed options, and returns a
frozen type whose ``to_dict()`` is the JSON that the command's ``--json`` prints and the user
API of ``spothop server`` answers (``docs/server.md``), so the two cannot drift apart:

=====================================  ==========================================  ===================
service                                CLI                                         server
=====================================  ==========================================  ===================
:func:`~.launch.launch_job`            ``launch --detach --json``                  ``POST /v1/jobs``
:func:`~.jobs.list_jobs`               ``jobs --json``                             ``GET /v1/jobs``
:func:`~.jobs.job_status`              ``status JOB --json``                       ``GET /v1/jobs/{id}``
:func:`~.jobs.request_cancel`          ``cancel JOB --json``                       ``POST /v1/jobs/{id}/cancel``
:func:`~.logs.job_logs`                ``logs JOB --json``                         ``GET /v1/jobs/{id}/logs``
:func:`~.events.stream_events`         ``events --job JOB --json`` (one a line)    ``GET /v1/jobs/{id}/events``
:func:`~.report.job_report`            ``report JOB --json``                       ``GET /v1/jobs/{id}/report``
:func:`~.report.costs`                 ``report --since S --by B --json``          ``GET /v1/costs``
:func:`~.offers.find_offers`           ``offers --json``                           ``GET /v1/offers``
:func:`~.plan.plan_request`            ``plan FILE --json``                        ``POST /v1/plans``
=====================================  ==========================================  ===================

A list the server wraps in an object (``{"jobs": […]}``) is the result's ``to_dict()``; its
``to_list()`` is what the CLI prints, as the CLI's client unwraps the server's, so ``--json``
is identical either way.

The layer sits above ``jobs/``, ``observe/`` and the control plane, below the fronts
(``cli/``, ``server/``): it imports neither front. Its modules import only the standard
library when loaded (the rest when called), so a command that does not need a service does
not pay for it.
"""

from __future__ import annotations

from spothop.service.events import EventPage, cursor_from_text, cursor_text, stream_events
from spothop.service.jobs import (
    CANCEL_EVENT,
    CancelRequested,
    InstanceView,
    JobList,
    JobProgress,
    JobQuery,
    JobStatus,
    JobStorage,
    LaunchFailure,
    QueueCounts,
    instances_of,
    job_status,
    job_storage,
    list_jobs,
    request_cancel,
)
from spothop.service.launch import LaunchedJob, check_launchable, launch_job
from spothop.service.logs import AttemptLog, JobLogs, LogTail, job_logs
from spothop.service.offers import (
    OfferList,
    find_offers,
    offer_query_from_params,
    offer_query_params,
)
from spothop.service.plan import (
    PlanRequest,
    PlanResult,
    data_location,
    plan,
    plan_providers,
    plan_request,
    reliability_history,
)
from spothop.service.report import CostQuery, CostSummary, ReportWithAdvice, costs, job_report

__all__ = [
    "CANCEL_EVENT",
    "AttemptLog",
    "CancelRequested",
    "CostQuery",
    "CostSummary",
    "EventPage",
    "InstanceView",
    "JobList",
    "JobLogs",
    "JobProgress",
    "JobQuery",
    "JobStatus",
    "JobStorage",
    "LaunchFailure",
    "LaunchedJob",
    "LogTail",
    "OfferList",
    "PlanRequest",
    "PlanResult",
    "QueueCounts",
    "ReportWithAdvice",
    "check_launchable",
    "costs",
    "cursor_from_text",
    "cursor_text",
    "data_location",
    "find_offers",
    "instances_of",
    "job_logs",
    "job_report",
    "job_status",
    "job_storage",
    "launch_job",
    "list_jobs",
    "offer_query_from_params",
    "offer_query_params",
    "plan",
    "plan_providers",
    "plan_request",
    "reliability_history",
    "request_cancel",
    "stream_events",
]
