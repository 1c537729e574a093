"""Observability: the cost ledger, the interruption event stream, reports.

- :mod:`.billing`: a provider's :class:`~spothop.providers.base.BillingRule`
  applied to running time and a price: seconds billed, integer micro-dollars.
- :mod:`.ledger`: one billing record per instance attempt, attributed to the
  job and its tags across every recovery, and the controller's hooks that
  close the books; :mod:`.ledger_record` the record and its row,
  :mod:`.rates` the rate an attempt is charged at, :mod:`.reconcile` the
  records against the provider's own bill.
- :mod:`.events`: every lifecycle event (the agents' typed events and the
  controller's job events) as one stream; mean time between interruptions.
- :mod:`.report`: a job's cost against on-demand, interruptions, work
  recomputed, goodput; reports across jobs; recommendations. :mod:`.job_report` reads one
  job's report from the store.

See ``docs/observe.md``.
"""
