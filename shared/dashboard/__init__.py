"""The web dashboard: a small server-rendered view of the queue, over the facade.

functions/dashboard/main.py is its thin entry point; ``app.handle`` routes one
request. Pages: the overview (gauges and counts by pipeline, throughput and
failures over time as server-side SVG), batches with progress bars, one job's
timeline, the dead letters. Retry and cancel call the same Queue operations as
the CLI, behind a CSRF check (shared.dashboard.csrf). Pages refresh themselves
with a few lines of JavaScript served by the function itself (no CDN).

Figures over time come from a ``Figures`` source (shared.dashboard.figures): the
local cloud's log files, or Cloud Monitoring's time series of the log-based
metrics on GCP. How a person's browser reaches it on GCP: docs/seeing.md.
"""
