"""The dashboard: one page over the job store — jobs, live events, cost, markets, timelines.

- :mod:`.data`: one function per JSON endpoint (reusable by the REST server);
- :mod:`.app`: the HTTP app on the standard library's ThreadingHTTPServer,
  with server-sent events and ``/metrics``;
- ``static/``: the page, its script and style; the charts are plotly.js,
  served from the installed ``plotly`` package (no CDN, no network).

See ``docs/dashboard.md``.
"""
