"""GET /jobs: jobs listed a page at a time from the indexes, never by walking jobs/.

A query names its sources, read one after the other in name order: a batch's markers
(batches/<b>/), else a tag's markers (tags/<tag>/: every job submitted with the tag,
done ones too), else the pending index (pending/: queued, running and waiting jobs), time's
delayed jobs (scheduled/) and flow control's ended index (ended/<status>/: failed and
cancelled jobs). Done jobs have no index of their own (it would grow with history), so
they are listed by batch. An index is only a hint: each listed id's record is read and the
filters are checked on it, so a page may hold fewer jobs than asked; `next_page_token`
says where the next page starts (an opaque, URL-safe string naming the source and the
last name listed, bound to the query's filters: shared.params), and its absence
says the listing is over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared import job_queue, listing, params, records, status
from shared.errors import InvalidInput
from shared.features import tags
from shared.features.flow_policy import ENDED_PREFIX
from shared.jobs import JobRecord, JobStatus
from shared.timing import SCHEDULED_PREFIX

if TYPE_CHECKING:
    from shared.storage import Store

PAGE_SIZE = 50
PAGE_SIZE_MAX = 200
_PENDING = "pending"
_BATCH = "batch"
_KEY = re.compile(r"[A-Za-z0-9._:=@+/~-]{1,300}")


@dataclass(frozen=True)
class Query:
    """What GET /jobs asks: all filters must hold."""

    batch: str | None = None
    status: JobStatus | None = None
    pipeline: str | None = None
    tag: str | None = None
    page_size: int = PAGE_SIZE
    page_token: str | None = None


@dataclass
class Page:
    """One page: the jobs' summaries, and where the next page starts (None: the end)."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    next_page_token: str | None = None
    unreadable: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"jobs": self.jobs, "next_page_token": self.next_page_token}
        if self.unreadable:
            body["unreadable"] = self.unreadable
        return body


def parse_query(args: dict[str, str]) -> Query:
    """The query string of GET /jobs, validated; InvalidInput names the bad parameter."""
    unknown = sorted(set(args) - {"batch", "status", "pipeline", "tag", "page_size", "page_token"})
    if unknown:
        raise InvalidInput(f"unknown parameters {', '.join(u[:40] for u in unknown[:5])}", "query")
    empty = sorted(k for k, v in args.items() if not v)
    if empty:
        raise InvalidInput(f"{empty[0]} is empty; leave it out instead", empty[0])
    batch = args.get("batch") or None
    if batch is not None:
        records.validate_batch_id(batch)
    tag = args.get("tag") or None
    problem = tags.tag_problem(tag) if tag is not None else None
    if problem is not None:
        raise InvalidInput(problem, "tag")
    raw_status = args.get("status") or ""
    try:
        job_status = JobStatus(raw_status) if raw_status else None
    except ValueError:
        known = ", ".join(JobStatus)
        raise InvalidInput(
            f"status must be one of {known}, got {raw_status[:40]!r}", "status"
        ) from None
    if job_status is JobStatus.DONE and batch is None and tag is None:
        raise InvalidInput(
            "done jobs are listed by batch or tag (no index holds every done job); add batch=",
            "status",
        )
    if len(args.get("pipeline") or "") > 128:
        raise InvalidInput("pipeline is longer than 128 characters", "pipeline")
    size_text = args.get("page_size")
    size = PAGE_SIZE
    if size_text is not None:
        size = params.integer(size_text, "page_size", low=1, high=PAGE_SIZE_MAX)
    return Query(
        batch,
        job_status,
        args.get("pipeline") or None,
        tag,
        size,
        args.get("page_token") or None,
    )


def sources(query: Query) -> list[str]:
    """The indexes this query reads, in order: 'batch', 'pending' or an index prefix."""
    if query.batch is not None:
        return [_BATCH]
    if query.tag is not None:
        return [f"{tags.PREFIX}{query.tag}/"]
    wanted = (query.status,) if query.status is not None else tuple(JobStatus)
    out: list[str] = []
    if any(s in (*job_queue.PENDING_STATUSES, *job_queue.WAITING_STATUSES) for s in wanted):
        out.append(_PENDING)
    if any(s in (JobStatus.QUEUED, JobStatus.WAITING) for s in wanted):
        out.append(SCHEDULED_PREFIX)
    out += [f"{ENDED_PREFIX}{s}/" for s in (JobStatus.CANCELLED, JobStatus.FAILED) if s in wanted]
    return out


def page(store: Store, query: Query, fields: tuple[str, ...] = ()) -> Page:
    """One page of jobs matching the query (see the module's docstring for the cost); each
    summary has the record's `fields` too (status.summary), as the dashboard shows them."""
    order = sources(query)
    start_source, start_key = _decode(query, order)
    ids: list[str] = []
    last: tuple[str, str] | None = None
    for source in order[order.index(start_source) :] if start_source else order:
        key = start_key if source == start_source else None
        for name, job_id in _names(store, source, query, key, query.page_size - len(ids)):
            ids.append(job_id)
            last = (source, name)
        if len(ids) >= query.page_size:
            break
    found = listing.read_many(store, ids)
    result = Page(unreadable=[*found.corrupt])
    for record in found.records:
        if _matches(record, query):
            result.jobs.append(status.summary(record, fields))
    if last is not None and len(ids) >= query.page_size:
        result.next_page_token = _encode(query, *last)
    return result


def _names(
    store: Store, source: str, query: Query, after: str | None, n: int
) -> list[tuple[str, str]]:
    """Up to n (name, job id) of one source after `after` (the names are ids, or keys
    under a prefix: a pending marker's key carries its hash segment)."""
    if n <= 0:
        return []
    extra = 1 if after is not None else 0  # start_at is inclusive: the last one is listed again
    if source == _BATCH:
        assert query.batch is not None
        names = [(i, i) for i in store.list_batch(query.batch, limit=n + extra, start_at=after)]
    elif source == _PENDING:
        listed = store.list_pending(limit=n + extra, start_at=after)
        names = [(e.key, e.job_id) for e in listed]
    else:
        start = source + after if after is not None else None
        blobs = store.list_blobs(source, start_at=start, limit=n + extra)
        keys = [b.name[len(source) :] for b in blobs]
        names = [(k, k.rsplit("/", 1)[-1]) for k in keys]
    if after is not None and names[:1] and names[0][0] == after:
        names = names[1:]
    return names[:n]


def _matches(record: JobRecord, query: Query) -> bool:
    if query.status is not None and record.get("status") != query.status:
        return False
    if query.pipeline is not None and record.get("pipeline") != query.pipeline:
        return False
    if query.tag is not None and not tags.has(record, query.tag):
        return False
    return query.batch is None or record.get("batch_id") == query.batch


def _binding(query: Query) -> str:
    """What a page token is bound to: the query's filters (never its page size)."""
    return params.binding([query.batch, query.status, query.pipeline, query.tag])


def _encode(query: Query, source: str, key: str) -> str:
    return params.encode_token([source, key], _binding(query))


def _decode(query: Query, order: list[str]) -> tuple[str | None, str | None]:
    """(source, last key) of a page token from the same query; InvalidInput otherwise."""
    if query.page_token is None:
        return None, None
    source, key = params.decode_token(
        query.page_token, "page_token", bound_to=_binding(query), size=2
    )
    if source not in order or not _KEY.fullmatch(key):
        raise InvalidInput("page_token is not one this query gave; start without it", "page_token")
    return source, key
