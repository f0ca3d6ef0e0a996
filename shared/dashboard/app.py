"""Routing and rendering of the dashboard: one request in, one page (or redirect) out.

GET  /                      overview        GET  /batches, /batches/<id>
GET  /jobs?status=&pipeline=&batch=&tag=    search, a page at a time (shared.http.pages)
GET  /finished?day=&status=                 failed and cancelled jobs of one day (ended/)
GET  /jobs/<id>             one job         POST /jobs/<id>/retry, /jobs/<id>/cancel,
                                            /jobs/<id>/approve, /jobs/<id>/reject (waits)
GET  /pipelines             pause flags     POST /pipelines/<name>/pause, .../resume
GET  /bulk?action=&batch=&status=&pipeline=&since=   the count and its confirm form
POST /bulk/retry, /bulk/cancel              act on a confirmed count (shared.http.routes)
GET  /dead-letters          peek            GET  /metrics  (JSON: gauges now, counts)
GET  /assets/<file>         the page's CSS and script (served here: no CDN)

A POST that passes the CSRF checks (shared.dashboard.csrf) calls the same code as the
CLI and the HTTP API (Queue.retry / cancel / pause / resume; a bulk action through
shared.http.routes' count and confirm) and answers 303 to a page that says what it did.
Every GET only reads. The author in a history or a pause flag is what the platform
verified (shared.http.identity), never a header the caller chose.

A browser's app answers refusals as pages: every refusal (the library's errors,
a bug, and what functions-framework refuses before the function runs) is the
error page with its status, the same `error` and `reason` the API functions put
in JSON. /metrics, and a client that asks for JSON first (`Accept`), get that
JSON instead. A page renders whatever a record holds: a hand-edited field is
shown as stored, never a 500.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import flask
import jinja2

from shared import bulk, job_queue, metrics, records, status, tracing
from shared.clock import Clock, utcnow
from shared.dashboard import charts, csrf, deadletters, views, waterfall
from shared.dashboard.figures import Figures
from shared.errors import AlreadyExists, IllegalTransition, InvalidInput, NotFound, ReclaimError
from shared.http import identity, pages
from shared.http import outputs as output_routes
from shared.http.edge import Refusal, refusal_for
from shared.jobs import JobStatus
from shared.logs import get_logger
from shared.outputs import committed
from shared.pipelines import pipeline_names
from shared.queue import Queue

log = get_logger(__name__)
HERE = Path(__file__).resolve().parent
STATIC = {"dashboard.css": "text/css", "dashboard.js": "text/javascript"}
_JOB_ACTION = re.compile(r"jobs/([^/]+)/(retry|cancel|approve|reject)")  # approve: waits
_PIPELINE_ACTION = re.compile(r"pipelines/([^/]+)/([^/]+)")
_BULK_ACTION = re.compile(r"bulk/([^/]+)")
CSRF_KEY_OBJECT = "dashboard/csrf-key"
"""The HMAC key of the CSRF tokens: random, created once (create-only) in the records
bucket, so every instance of the dashboard, and the next one after a scale to zero,
accepts the tokens of the others. Whoever can read it can already write every record."""
_keys: dict[str, bytes] = {}
_keys_lock = threading.Lock()

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
    caller: _Caller | None = None
    try:
        caller = _Caller.of(request, queue)
        page = _Page(request, queue, figures, clock, caller, peek or deadletters.peek)
        response = page.route()
    except ReclaimError as exc:
        refusal = _refusal(exc)
        if refusal.status >= 500:
            log.error("dashboard request failed", path=request.path, reason=refusal.reason)
        response = _refusal_response(request, refusal, queue.settings.project, clock())
    if caller is not None and request.cookies.get(csrf.COOKIE) != caller.token:
        # Not Secure: on GCP the browser talks to `gcloud run services proxy` over
        # http://localhost while Cloud Run sees X-Forwarded-Proto https, and a browser that
        # does not count http://localhost as secure drops a Secure cookie, so every button
        # would fail its CSRF check. The cookie holds only the CSRF token (bound to the
        # verified caller: shared.dashboard.csrf), HttpOnly and SameSite=Strict.
        response.set_cookie(csrf.COOKIE, caller.token, httponly=True, samesite="Strict", path="/")
    return _harden(response)


def csrf_key(queue: Queue) -> bytes:
    """The bucket's CSRF key (created on first use), read once per process."""
    bucket = queue.settings.records_bucket
    with _keys_lock:
        if bucket not in _keys:
            try:
                _keys[bucket] = queue.store.read_blob(CSRF_KEY_OBJECT).data
            except NotFound:
                # another instance may make it first (AlreadyExists): use theirs
                with contextlib.suppress(AlreadyExists):
                    queue.store.put_blob(CSRF_KEY_OBJECT, csrf.new_key(), generation=0)
                _keys[bucket] = queue.store.read_blob(CSRF_KEY_OBJECT).data
        return _keys[bucket]


class _Caller:
    """Who is asking (their verified author), and their CSRF token and its key."""

    def __init__(self, by: str, key: bytes, token: str) -> None:
        self.by = by
        self.key = key
        self.token = token

    @classmethod
    def of(cls, request: flask.Request, queue: Queue) -> _Caller:
        """The request's verified author, and the token issued to them (theirs if the
        cookie holds one, else a new one)."""
        by = identity.author("dashboard", request.headers, iap_audience=queue.settings.iap_audience)
        key = csrf_key(queue)
        token = request.cookies.get(csrf.COOKIE, "")
        if not csrf.issued_to(token, key, by):
            token = csrf.new_token(key, by)
        return cls(by, key, token)


def refusal_page(request: flask.Request, refusal: Refusal) -> flask.Response:
    """The dashboard's answer to a refusal made outside a page (shared.http.edge's Render):
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
        caller: _Caller,
        peek: Callable[[str, str], list[Any]],
    ) -> None:
        self.request = request
        self.queue = queue
        self.figures = figures
        self.clock = clock
        self.caller = caller
        self.token = caller.token
        self.peek = peek

    def route(self) -> flask.Response:
        path = self.request.path.strip("/")
        method = self.request.method
        for pattern, press in (
            (_JOB_ACTION, self.job_action),
            (_PIPELINE_ACTION, self.pipeline_action),
            (_BULK_ACTION, self.bulk_action),
        ):
            button = pattern.fullmatch(path)
            if button:
                _allow(method, "POST")
                return press(*button.groups())
        _allow(method, "GET", "HEAD")
        pages_here: dict[str, Callable[[], flask.Response]] = {
            "": self.overview,
            "jobs": self.jobs,
            "finished": self.finished,
            "batches": self.batches,
            "pipelines": self.pipelines,
            "bulk": self.bulk_count,
            "dead-letters": self.dead_letters,
            "metrics": self.metrics_json,
        }
        if path in pages_here:
            return pages_here[path]()
        if path.startswith("batches/"):
            return self.batch(path.removeprefix("batches/"))
        if path.startswith("jobs/") and "/outputs/" in path:  # a job page's output link
            job_id, _, name = path.removeprefix("jobs/").partition("/outputs/")
            return output_routes.download(self.queue, self.request, job_id, name)
        if path.startswith("jobs/"):
            return self.job(path.removeprefix("jobs/"))
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
        paused = [p for p in views.pipelines(self.queue) if p.paused]
        return self.render("overview.html", o=data, source=self.figures.description, paused=paused)

    def batch(self, batch_id: str) -> flask.Response:
        view = self.queue.get_batch(batch_id)
        summary = views.batch_summary(view.batch_id, view.counts, view.done)
        return self.render("batch.html", b=summary, members=view.members, truncated=view.truncated)

    def job(self, job_id: str) -> flask.Response:
        record = self.queue.read(job_id)
        errors = status.errors_shown(record)
        steps = views.timeline(record, self.clock())
        trace = tracing.parse(record.get("traceparent"))
        project = self.queue.settings.project
        logs_url = None
        local_logs = views.local_log_dir(self.queue.settings.metrics_source)
        if trace is not None and local_logs is None:  # locally there is no Cloud Logging
            query = quote(f'trace="projects/{project}/traces/{trace.trace_id}"', safe="")
            logs_url = (
                f"https://console.cloud.google.com/logs/query;query={query}?project={project}"
            )
        trace_view = waterfall.for_job(record)  # its spans: the collector's, else the record's
        return self.render(
            "job.html",
            job=record,
            steps=steps,
            stages=views.stage_durations(steps),
            actions=views.actions(record),
            outputs=committed.committed(self.queue.store, record),
            trace=trace,
            logs_url=logs_url,
            local_logs=local_logs,
            waterfall=trace_view,
            trace_url=waterfall.cloud_trace_url(project, trace.trace_id) if trace else None,
            message=self.request.args.get("done"),
            relations=views.relations(self.queue, record),
            max_attempts=job_queue.max_attempts_of(record, self.queue.settings.max_attempts),
            error=views.error_fields(errors["error"]),
            previous_error=views.error_fields(errors.get("previous_error")),
            paused=bool(status.feature_views(self.queue.ctx, record).get("paused")),
            facts=views.feature_facts(record, self.queue.ctx.summary_fields()),
            waits=views.waits(record),
        )

    def batches(self) -> flask.Response:
        batch_id = self.request.args.get("id", "").strip()
        if batch_id:
            return _redirect(f"/batches/{quote(batch_id)}", 303)
        return self.render("batches.html", batches=views.active_batches(self.queue))

    def jobs(self) -> flask.Response:
        job_id = self.request.args.get("id", "").strip()
        return _redirect(f"/jobs/{quote(job_id)}", 303) if job_id else self.search()

    def search(self) -> flask.Response:
        """Jobs by status, pipeline, batch and tag, a page at a time from the indexes, as
        GET /jobs pages them (shared.http.pages): never a walk of jobs/. Done jobs have
        no index of their own: asked without a batch or a tag, the page says where to
        find them instead of answering the API's 400."""
        asked = views.filled(self.request.args, drop=("id",))
        if views.needs_batch(asked):
            query = pages.parse_query({k: v for k, v in asked.items() if k != "status"})
            return self.render(
                "jobs.html",
                q=query,
                asked_status=asked["status"],
                found=pages.Page(),
                next_url=None,
                statuses=[s.value for s in JobStatus],
                pipelines=pipeline_names(),
                bulk_links=[],
                needs_batch=True,
                today=self.clock().date().isoformat(),
            )
        query = pages.parse_query(asked)
        found = pages.page(self.queue.store, query, self.queue.ctx.summary_fields())
        next_url = None
        if found.next_page_token is not None:
            next_url = "/jobs?" + urlencode({**asked, "page_token": found.next_page_token})
        return self.render(
            "jobs.html",
            q=query,
            found=found,
            next_url=next_url,
            statuses=[s.value for s in JobStatus],
            pipelines=pipeline_names(),
            bulk_links=views.bulk_links(query),
            asked_status=query.status.value if query.status else "",
            needs_batch=False,
            today=self.clock().date().isoformat(),
        )

    def finished(self) -> flask.Response:
        """GET /finished?day=YYYY-MM-DD&status=failed|cancelled: the jobs that ended so
        that day, from flow control's ended index (one listing per fan-out slot), with
        links to the days before and after; done jobs are browsed by their batch."""
        shown = views.finished_day(
            self.queue,
            self.request.args.get("day", ""),
            self.request.args.get("status", ""),
            self.clock(),
        )
        return self.render("finished.html", f=shown)

    def pipelines(self) -> flask.Response:
        return self.render(
            "pipelines.html",
            rows=views.pipelines(self.queue),
            message=self.request.args.get("done"),
        )

    def bulk_count(self) -> flask.Response:
        """GET /bulk: without a selection, its form; with one, the count, the first ids and
        the confirm form (a count changes nothing)."""
        asked = views.filled(self.request.args, drop=("done",))
        counted = None
        if asked:
            action = asked.pop("action", "")
            if action not in bulk.ACTS_ON:
                raise InvalidInput(f"action must be one of {', '.join(bulk.ACTS_ON)}", "action")
            if "confirm" in asked:
                raise InvalidInput("a count confirms nothing; press the form's Confirm", "confirm")
            counted = bulk.count(self.queue.ctx, action, asked)
        return self.render(
            "bulk.html",
            counted=counted,
            asked=asked,
            statuses=[s.value for s in JobStatus],
            pipelines=pipeline_names(),
            shown=bulk.SHOWN,
            message=self.request.args.get("done"),
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

    def check_form(self, what: str) -> None:
        """A 403 for a POST that fails a CSRF check (shared.dashboard.csrf); nothing runs."""
        problem = csrf.problem(
            self.request.headers,
            self.request.cookies,
            self.request.form,
            key=self.caller.key,
            who=self.caller.by,
            host=self.request.host,
        )
        if problem is not None:
            log.warning("dashboard refused a form", form=what[:200], reason=problem)
            raise Refusal(403, "forbidden", problem)

    def job_action(self, job_id: str, action: str) -> flask.Response:
        records.validate_job_id(job_id)
        self.check_form(f"{action} {job_id}")
        by = self.caller.by
        if action == "retry":
            retried = self.queue.retry(job_id, by=by)
            note = "retried" if retried.rung else "retried (the sweep will ring it)"
        elif action in ("approve", "reject"):  # its waitpoint (docs/waiting.md)
            try:
                done = self.queue.complete_job(job_id, {"approved": action == "approve"}, by=by)
            except IllegalTransition as exc:
                raise Refusal(409, "not waiting", str(exc)) from None
            note = f"{action}d: {done.detail}" if done.won else f"not {action}d: {done.detail}"
        else:
            self.queue.cancel(job_id, by=by, reason="cancelled from the dashboard")
            note = "cancelled"
        return _redirect(f"/jobs/{quote(job_id)}?done={quote(note)}", 303)

    def pipeline_action(self, pipeline: str, action: str) -> flask.Response:
        """Pause or resume a pipeline (flow control, as `reclaim pause|resume`)."""
        if action not in ("pause", "resume"):
            raise Refusal(404, "not found", f"no action {action[:40]!r}; try pause or resume")
        self.check_form(f"{action} {pipeline}")
        by = self.caller.by
        if action == "pause":
            changed = self.queue.pause(pipeline, by=by)
            note = f"paused {pipeline}" if changed else f"{pipeline} was paused already"
        else:
            resumed = self.queue.resume(pipeline, by=by)
            more = "; the sweep rings the rest" if resumed.more else ""
            note = f"resumed {pipeline}: {resumed.rung} parked job(s) rung{more}"
        return _redirect(f"/pipelines?done={quote(note)}", 303)

    def bulk_action(self, action: str) -> flask.Response:
        """Act on the selection of a confirmed count; 409 when more jobs match now than the
        count showed, 400 for a token of another selection. Then back to a fresh count."""
        self.check_form(f"bulk {action}")
        if action not in bulk.ACTS_ON:
            raise Refusal(404, "not found", f"no bulk action {action[:40]!r}; try cancel or retry")
        fields = views.filled(self.request.form, drop=(csrf.FIELD,))
        confirm = fields.pop("confirm", None)
        if confirm is None:
            raise InvalidInput("confirm is missing; count the selection first, then confirm")
        counted = bulk.count(self.queue.ctx, action, fields)
        reason = fields.get("reason") or "cancelled from the dashboard"
        done = bulk.confirm(self.queue.ctx, counted, confirm, by=self.caller.by, reason=reason)
        note = (
            f"{action}: {len(done['acted'])} of {done['matching']} job(s); "
            f"{len(done['skipped'])} changed meanwhile; {len(done['errors'])} error(s)"
            + (f"; {done['remaining']} left: confirm again" if done["remaining"] else "")
        )
        selection = {k: v for k, v in fields.items() if k != "reason"}
        return _redirect("/bulk?" + urlencode({"action": action, **selection, "done": note}), 303)


def _redirect(location: str, code: int) -> flask.Response:
    response = flask.Response(status=code)
    response.headers["Location"] = location
    return response


def _allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise Refusal(
            405,
            "method not allowed",
            f"{method} is not allowed here; use {' or '.join(allowed)}",
            {"Allow": ", ".join(allowed)},
        )
