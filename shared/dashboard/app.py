"""Routing and rendering of the dashboard: one request in, one page (or redirect) out.

GET  /                      overview        GET  /batches, /batches/<id>
GET  /jobs/<id>             one job         POST /jobs/<id>/retry, /jobs/<id>/cancel
GET  /dead-letters          peek            GET  /metrics  (JSON: gauges now, counts)
GET  /assets/<file>         the page's CSS and script (served here: no CDN)

A POST that passes the CSRF checks calls the facade (Queue.retry / Queue.cancel,
as `reclaim retry` / `reclaim cancel` do) and answers 303 to the job's page.

A browser's app answers refusals as pages: every refusal (the library's errors,
a bug, and what functions-framework refuses before the function runs) is the
error page with its status, the same `error` and `reason` the API functions put
in JSON. /metrics, and a client that asks for JSON first (`Accept`), get that
JSON instead. A page renders whatever a record holds: a hand-edited field is
shown as stored, never a 500.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import flask
import jinja2

from shared import job_queue, metrics, records, tracing
from shared.clock import Clock, utcnow
from shared.dashboard import charts, csrf, deadletters, views
from shared.dashboard.figures import Figures
from shared.errors import IllegalTransition, ReclaimError
from shared.http import Refusal, refusal_for
from shared.logs import get_logger
from shared.pipelines import pipeline_names
from shared.queue import Queue

log = get_logger(__name__)
HERE = Path(__file__).resolve().parent
STATIC = {"dashboard.css": "text/css", "dashboard.js": "text/javascript"}
_JOB_ACTION = re.compile(r"jobs/([^/]+)/(retry|cancel)")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
)
_env.globals.update(line_chart=charts.line_chart, quote=lambda value: quote(str(value)))
_env.filters["error_text"] = views.error_text
_env.filters["seconds"] = lambda s: (
    "" if s is None else f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"
)


def handle(
    request: flask.Request,
    queue: Queue,
    figures: Figures,
    *,
    clock: Clock = utcnow,
    peek: Callable[[str, str], list[Any]] | None = None,
) -> flask.Response:
    """Answer one request; library errors become the error page with their status."""
    token = request.cookies.get(csrf.COOKIE) or csrf.new_token()
    page = _Page(request, queue, figures, clock, token, peek or deadletters.peek)
    try:
        response = page.route()
    except ReclaimError as exc:
        refusal = _refusal(exc)
        if refusal.status >= 500:
            log.error("dashboard request failed", path=request.path, reason=refusal.reason)
        response = _refusal_response(request, refusal, queue.settings.project, clock())
    if request.cookies.get(csrf.COOKIE) != token:
        secure = request.is_secure or request.headers.get("X-Forwarded-Proto") == "https"
        response.set_cookie(
            csrf.COOKIE, token, httponly=True, samesite="Strict", secure=secure, path="/"
        )
    return _harden(response)


def refusal_page(request: flask.Request, refusal: Refusal) -> flask.Response:
    """The dashboard's answer to a refusal made outside a page (shared.http's Render):
    a bug, a misconfiguration, or a path functions-framework cannot route."""
    return _harden(_refusal_response(request, refusal, "", utcnow()))


def _refusal(exc: ReclaimError) -> Refusal:
    if isinstance(exc, IllegalTransition):  # a button on a page the job has moved past
        return Refusal(409, "illegal transition", f"{exc}; reload the page")
    return refusal_for(exc)


def _refusal_response(
    request: flask.Request, refusal: Refusal, project: str, now: datetime
) -> flask.Response:
    if _wants_json(request):
        return refusal.answer()
    html = _env.get_template("error.html").render(
        status=refusal.status,
        error=refusal.error,
        reason=refusal.reason,
        now=now,
        project=project,
        nav=request.path,
    )
    response = flask.Response(html, status=refusal.status, mimetype="text/html")
    response.headers.update(refusal.headers)
    return response


def _wants_json(request: flask.Request) -> bool:
    """/metrics is JSON; so is the answer to a client that prefers JSON to HTML."""
    if request.path.strip("/") == "metrics":
        return True
    best = request.accept_mimetypes.best_match(["text/html", "application/json"])
    return best == "application/json"


def _harden(response: flask.Response) -> flask.Response:
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["X-Frame-Options"] = "DENY"  # no framing: no click-jacking of the buttons
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'"
    )
    return response


class _Page:
    def __init__(
        self,
        request: flask.Request,
        queue: Queue,
        figures: Figures,
        clock: Clock,
        token: str,
        peek: Callable[[str, str], list[Any]],
    ) -> None:
        self.request = request
        self.queue = queue
        self.figures = figures
        self.clock = clock
        self.token = token
        self.peek = peek

    def route(self) -> flask.Response:
        path = self.request.path.strip("/")
        method = self.request.method
        action = _JOB_ACTION.fullmatch(path)
        if action:
            _allow(method, "POST")
            return self.job_action(action.group(1), action.group(2))
        _allow(method, "GET", "HEAD")
        if path == "":
            return self.overview()
        if path == "batches":
            batch_id = self.request.args.get("id", "").strip()
            if batch_id:
                return _redirect(f"/batches/{quote(batch_id)}", 303)
            return self.render("batches.html", batches=views.active_batches(self.queue))
        if path.startswith("batches/"):
            return self.batch(path.removeprefix("batches/"))
        if path == "jobs":
            job_id = self.request.args.get("id", "").strip()
            return _redirect(f"/jobs/{quote(job_id)}" if job_id else "/", 303)
        if path.startswith("jobs/"):
            return self.job(path.removeprefix("jobs/"))
        if path == "dead-letters":
            return self.dead_letters()
        if path == "metrics":
            return self.metrics_json()
        if path.startswith("assets/") and path.removeprefix("assets/") in STATIC:
            name = path.removeprefix("assets/")
            response = flask.Response((HERE / "static" / name).read_bytes(), mimetype=STATIC[name])
            response.headers["Cache-Control"] = "max-age=300"
            return response
        raise Refusal(404, "not found", f"no page /{path}")

    # --- pages

    def render(self, template: str, **context: Any) -> flask.Response:
        html = _env.get_template(template).render(
            csrf_field=csrf.FIELD,
            csrf_token=self.token,
            now=self.clock(),
            project=self.queue.settings.project,
            nav=self.request.path,
            **context,
        )
        return flask.Response(html, mimetype="text/html")

    def overview(self) -> flask.Response:
        data = views.overview(self.queue, self.figures, self.clock())
        return self.render("overview.html", o=data, source=self.figures.description)

    def batch(self, batch_id: str) -> flask.Response:
        view = self.queue.get_batch(batch_id)
        summary = views.batch_summary(view.batch_id, view.counts, view.done)
        return self.render("batch.html", b=summary, members=view.members, truncated=view.truncated)

    def job(self, job_id: str) -> flask.Response:
        record = self.queue.read(job_id)
        steps = views.timeline(record, self.clock())
        trace = tracing.parse(record.get("traceparent"))
        project = self.queue.settings.project
        logs_url = None
        if trace is not None:
            query = quote(f'trace="projects/{project}/traces/{trace.trace_id}"', safe="")
            logs_url = (
                f"https://console.cloud.google.com/logs/query;query={query}?project={project}"
            )
        return self.render(
            "job.html",
            job=record,
            steps=steps,
            stages=views.stage_durations(steps),
            actions=views.actions(record),
            outputs=_outputs(record),
            trace=trace,
            logs_url=logs_url,
            message=self.request.args.get("done"),
            relations={
                k: v for k in ("parents", "children") if isinstance(v := record.get(k), list) and v
            },
            max_attempts=job_queue.max_attempts_of(record, self.queue.settings.max_attempts),
            error=views.error_fields(record.get("error")),
            facts=views.feature_facts(record, self.queue.ctx.summary_fields()),
        )

    def dead_letters(self) -> flask.Response:
        s = self.queue.settings
        letters = self.peek(s.project, s.dead_letter_subscription)
        return self.render(
            "dead_letters.html", letters=letters, subscription=s.dead_letter_subscription
        )

    def metrics_json(self) -> flask.Response:
        """The same figures as JSON: live gauges (the sweep's own computation over a
        fresh listing of the pending index) and the last hour's counts by label."""
        now = self.clock()
        pending = views.read_pending(self.queue)
        gauges = metrics.queue_gauges(
            pending.records,
            now,
            pipelines=pipeline_names(),
            skew_s=self.queue.settings.clock_skew_seconds,
        )
        start = now - timedelta(hours=1)
        counts: dict[str, Any] = {}
        for metric in metrics.LOG_METRICS:
            if metric.event in (metrics.Event.QUEUE,):
                continue
            group = metric.labels[-1] if metric.labels else None
            buckets = self.figures.series(metric, start=start, step_s=3600, size=1, group_by=group)
            counts[metric.name] = {k: v[0] for k, v in sorted(buckets.count.items())}
        body = {
            "time": job_queue.format_time(now),
            "gauges": {p: g.fields() for p, g in gauges.items()},
            "pending_truncated": pending.truncated,
            "last_hour": counts,
            "source": self.figures.description,
        }
        return flask.Response(json.dumps(body, default=str, indent=1), mimetype="application/json")

    # --- buttons

    def job_action(self, job_id: str, action: str) -> flask.Response:
        records.validate_job_id(job_id)
        problem = csrf.problem(dict(self.request.headers), self.request.cookies, self.request.form)
        if problem is not None:
            log.warning("dashboard refused a form", job_id=job_id, action=action, reason=problem)
            raise Refusal(403, "forbidden", problem)
        by = who(self.request)
        if action == "retry":
            retried = self.queue.retry(job_id, by=by)
            note = "retried" if retried.rung else "retried (the sweep will ring it)"
        else:
            self.queue.cancel(job_id, by=by, reason="cancelled from the dashboard")
            note = "cancelled"
        return _redirect(f"/jobs/{quote(job_id)}?done={quote(note)}", 303)


def _redirect(location: str, code: int) -> flask.Response:
    response = flask.Response(status=code)
    response.headers["Location"] = location
    return response


def who(request: flask.Request) -> str:
    """Who pressed a button, for the record's history: IAP's verified header when IAP
    fronts the service, else the email claim of the identity token Cloud Run already
    verified (run.invoker), else "dashboard" (the local cloud)."""
    iap = request.headers.get("X-Goog-Authenticated-User-Email", "")
    if iap:
        return "dashboard:" + iap.split(":", 1)[-1]
    email = _token_email(request.headers.get("Authorization", ""))
    return f"dashboard:{email}" if email else "dashboard"


def _token_email(header: str) -> str | None:
    import base64

    scheme, _, token = header.partition(" ")
    parts = token.split(".")
    if scheme.lower() != "bearer" or len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    email = claims.get("email") if isinstance(claims, dict) else None
    return email if isinstance(email, str) and len(email) < 320 else None


def _allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise Refusal(
            405,
            "method not allowed",
            f"{method} is not allowed here; use {' or '.join(allowed)}",
            {"Allow": ", ".join(allowed)},
        )


def _outputs(record: Any) -> list[str]:
    from shared.status import render_job

    return [str(o) for o in render_job(record, 1)["outputs"]]
