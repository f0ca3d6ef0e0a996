"""Bulk retry and cancel: select jobs from the cheapest index, then act, paced.

Cost is O(matching jobs), never a walk of jobs/: the candidates come from job ids given,
a batch's markers (batches/<b>/), the pending index (queued, running) or the features'
own indexes (Feature.indexed): flow control's ended index (ended/<status>/<YYYYMMDD>/<id>:
failed and cancelled jobs by day, written by a finish hook before the pending marker
goes, so a crash leaves it to the sweep's repeat of the hooks) and time's delayed jobs.
An index is only a hint: each candidate's record is read and the filters are
checked on it, so an entry that went stale (a retried job) selects nothing. Acting is a
policy transition with a CAS (shared.control); a job that changed meanwhile is skipped.
Re-running the same command continues where an interrupted one stopped: the jobs it
already moved no longer match.

Over HTTP (the admin routes, the dashboard) an act must bring back the token its count
answered. The token is bound to what the person saw: the action and the selection as
sent, the times it resolved to (a relative `since`, "24h", is fixed at the count), how
many jobs matched and a digest of their ids, and an expiry; it is signed with the
deployment's key (HMAC-SHA256, the key a create-only object beside the records, as the
dashboard's CSRF key is kept), and it acts once: the first confirm writes a create-only
marker of it. A confirm acts only when exactly the counted jobs match now.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared import job_queue, params
from shared.errors import (
    AlreadyExists,
    CorruptRecord,
    IllegalTransition,
    InvalidInput,
    LostRace,
    NotFound,
    SelectionChanged,
    SelectionGrew,
)
from shared.features import flow_policy as fp
from shared.jobs import JobRecord, JobStatus

if TYPE_CHECKING:
    from shared.seams import Context
    from shared.storage import Store

ACTS_ON: dict[str, tuple[JobStatus, ...]] = {
    "retry": (JobStatus.FAILED, JobStatus.CANCELLED),
    "cancel": job_queue.CANCELLABLE_STATUSES,  # queued, running, and waiting children
}
DEFAULT_SINCE = timedelta(days=7)
"""How far back the ended index is read when neither --since nor --batch bounds it."""
_READERS = 8


@dataclass(frozen=True)
class Selector:
    """Which jobs: ids, or a batch, and/or a status, a pipeline, a time (all must hold)."""

    job_ids: tuple[str, ...] = ()
    batch: str | None = None
    status: JobStatus | None = None
    pipeline: str | None = None
    since: datetime | None = None

    @property
    def is_bulk(self) -> bool:
        return bool(self.batch or self.status or self.pipeline or self.since) or (
            len(self.job_ids) > 1
        )


@dataclass
class BulkResult:
    """What an act did: the jobs moved, the ones that changed meanwhile, the errors."""

    acted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def parse_since(text: str, now: datetime) -> datetime:
    """'24h', '7d', '30m' before now, or an ISO date/time (UTC if no zone)."""
    units = {"m": 60, "h": 3600, "d": 86400}
    body = text.strip()
    try:
        if body[:-1].isascii() and body[:-1].isdigit() and body[-1:] in units:
            return now - timedelta(seconds=int(body[:-1]) * units[body[-1]])
        at = datetime.fromisoformat(body)
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    except OverflowError:  # 99999999d, or an offset that leaves the years 1 to 9999
        raise InvalidInput(
            f"--since {text!r} reaches outside the years 1 to 9999", "since"
        ) from None
    except ValueError:
        raise InvalidInput(
            f"--since {text!r} is neither a duration (30m, 24h, 7d) nor an ISO time", "since"
        ) from None


def check(selector: Selector, action: str) -> None:
    """InvalidInput when the selector cannot mean anything for this action."""
    allowed = ACTS_ON[action]
    if selector.status is not None and selector.status not in allowed:
        raise InvalidInput(
            f"{action} acts on {' or '.join(allowed)} jobs, not {selector.status}", "status"
        )
    if not (selector.job_ids or selector.is_bulk):
        raise InvalidInput("name job ids, or --batch, --status, --pipeline or --since", "jobs")


def select(ctx: Context, selector: Selector, action: str, now: datetime) -> list[JobRecord]:
    """The records the action would move, oldest first."""
    check(selector, action)
    ids = sorted(set(candidates(ctx, selector, action, now)))
    records = [r for r in _read_all(ctx.store, ids) if r is not None]
    chosen = [r for r in records if matches(r, selector, action)]
    return sorted(chosen, key=lambda r: (str(r.get("updated_at")), str(r.get("id"))))


def candidates(ctx: Context, selector: Selector, action: str, now: datetime) -> Iterable[str]:
    """Job ids from the narrowest index the selector allows."""
    if selector.job_ids:
        return selector.job_ids
    if selector.batch is not None:
        return ctx.store.list_batch(selector.batch)
    statuses = (selector.status,) if selector.status is not None else ACTS_ON[action]
    ids: list[str] = []
    since = selector.since or now - DEFAULT_SINCE
    for indexed in ctx.indexed():  # failed and cancelled by day, delayed jobs
        ids += indexed(ctx, statuses, since, now)
    if any(s in job_queue.CANCELLABLE_STATUSES for s in statuses):
        ids += [entry.job_id for entry in ctx.store.list_pending()]
    return ids


def matches(record: JobRecord, selector: Selector, action: str) -> bool:
    status = record.get("status")
    if status not in ACTS_ON[action]:
        return False
    if selector.status is not None and status != selector.status:
        return False
    if selector.pipeline is not None and record.get("pipeline") != selector.pipeline:
        return False
    if selector.batch is not None and record.get("batch_id") != selector.batch:
        return False
    if selector.since is not None:
        field_name = "updated_at" if status in fp.ENDED_STATUSES else "created_at"
        at = job_queue.parse_time(record.get(field_name))
        if at is None or at < selector.since:
            return False
    return True


def act(
    records: list[JobRecord],
    one: Callable[[str], object],
    *,
    per_s: float,
    progress: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> BulkResult:
    """Apply `one` (a retry or a cancel) to each job, at most `per_s` a second."""
    result = BulkResult()
    for n, record in enumerate(records, 1):
        job_id = str(record.get("id"))
        try:
            one(job_id)
        except (IllegalTransition, NotFound):
            result.skipped.append(job_id)  # changed meanwhile: nothing to do any more
        except (LostRace, CorruptRecord) as exc:
            result.errors[job_id] = str(exc)
        else:
            result.acted.append(job_id)
        if progress is not None:
            progress(n, len(records))
        if n < len(records):
            sleep(1.0 / per_s)
    return result


def _read_all(store: Store, ids: list[str]) -> list[JobRecord | None]:
    def read(job_id: str) -> JobRecord | None:
        try:
            return store.read(job_id).record
        except (NotFound, CorruptRecord, InvalidInput):
            return None

    if len(ids) <= 1:
        return [read(i) for i in ids]
    with ThreadPoolExecutor(max_workers=min(_READERS, len(ids))) as pool:
        return list(pool.map(read, ids))


# --------------------------------------------------------- a count and its confirmation
# What the admin routes (POST /bulk/<action>) and the dashboard's bulk page share: the
# selection a body names, its count with a token, and acting on a confirmed count.

CONFIRM_KEY_OBJECT = "bulk/confirm-key"
"""The HMAC key of the confirm tokens: random, created once (create-only) in the records
bucket, so every instance of the admin function and the dashboard, and the next one after
a scale to zero, accepts the tokens of the others. Whoever can read it can already write
every record."""
USED_PREFIX = "bulk/used/"
"""bulk/used/<nonce>: a confirm token's create-only marker, written before it acts."""
CONFIRM_TTL = timedelta(minutes=15)
"""How long a count's token may be confirmed."""
_KEY_BYTES = 32
_MAC_CHARS = 32
_DIGEST_CHARS = 32
_keys: dict[str, bytes] = {}
_keys_lock = threading.Lock()

BULK_MAX_PER_REQUEST = 100
"""Jobs one bulk request moves (at BULK_PACE a second, well within submit's timeout);
`remaining` says when to count and confirm again."""
BULK_PACE = 20.0
BODY_KEYS = {
    "batch": 128,
    "status": 20,
    "pipeline": 128,
    "since": 64,
    "confirm": 200,
    "reason": 500,
}
"""The keys a bulk body may hold (string values), each with its longest value."""
SHOWN = 20
"""Ids a count shows."""


@dataclass
class BulkCount:
    """A count: the selection (as sent, and as resolved), the records it matches now, and
    the token confirming it (signed when first asked for: a confirm never needs it)."""

    action: str
    selector: Selector
    chosen: list[JobRecord]
    given: dict[str, str | None] = field(default_factory=dict)
    sign: Callable[[], str] = field(default=lambda: "", repr=False, compare=False)

    @functools.cached_property
    def token(self) -> str:
        return self.sign()

    @property
    def ids(self) -> list[str]:
        return [str(r.get("id")) for r in self.chosen]

    def to_json(self) -> dict[str, Any]:
        ids = self.ids
        return {
            "action": self.action,
            "matching": len(ids),
            "jobs": ids[:SHOWN],
            "confirm": self.token,
        }


def count(ctx: Context, action: str, body: dict[str, Any]) -> BulkCount:
    """Select the jobs `body` names (the CLI's selection: batch, status, pipeline, since)
    for `action` (one of ACTS_ON), as a count a person confirms; InvalidInput."""
    if action not in ACTS_ON:
        raise InvalidInput(f"no bulk action {action[:40]!r}; try cancel or retry", "action")
    check_keys(body, BODY_KEYS)
    now = ctx.clock()
    selector = _selector(body, now)
    check(selector, action)
    chosen = select(ctx, selector, action, now)
    given = _given(body)
    ticket = _Ticket(
        count=len(chosen),
        since_us=_micros(selector.since),
        expires=int((now + CONFIRM_TTL).timestamp()),
        nonce=secrets.token_urlsafe(12),
        digest=_ids_digest(chosen),
    )
    return BulkCount(action, selector, chosen, given, lambda: ticket.sign(_key(ctx), action, given))


def confirm(
    ctx: Context, counted: BulkCount, token: object, *, by: str, reason: str | None
) -> dict[str, Any]:
    """Act on the jobs a count showed, once: InvalidInput when `token` is not a live token
    of a count of this action and selection (forged, of another selection, expired, used),
    SelectionGrew (SelectionChanged) when the jobs matching now are not the counted ones."""
    from shared import control

    action = counted.action
    ticket = _Ticket.verify(_key(ctx, create=False), token, action, counted.given, ctx.clock())
    if _used(ctx, ticket):  # said first: a used token's jobs have moved since
        raise InvalidInput(_USED, "confirm")
    since = _from_micros(ticket.since_us)
    chosen = counted.chosen
    if since != counted.selector.since:  # a relative since: the count's own time
        chosen = select(ctx, replace(counted.selector, since=since), action, ctx.clock())
    if len(chosen) > ticket.count:
        raise SelectionGrew(
            f"{len(chosen)} jobs match now, {ticket.count} were counted; count again and confirm"
        )
    if _ids_digest(chosen) != ticket.digest:
        raise SelectionChanged(
            f"the jobs matching now ({len(chosen)}) are not the {ticket.count} counted; "
            "count again and confirm"
        )
    _use(ctx, ticket, by)
    now_acting = chosen[:BULK_MAX_PER_REQUEST]
    if action == "retry":
        result = act(now_acting, lambda i: control.retry(ctx, i, by=by), per_s=BULK_PACE)
    else:
        result = act(
            now_acting,
            lambda i: control.cancel(ctx, i, by=by, reason=reason),
            per_s=BULK_PACE,
        )
    return {
        "action": action,
        "matching": len(chosen),
        "acted": result.acted,
        "skipped": result.skipped,
        "errors": result.errors,
        "remaining": len(chosen) - len(now_acting),
    }


@dataclass(frozen=True)
class _Ticket:
    """What a confirm token carries: the count, the resolved since (microseconds since
    the epoch, or -1 for none), the expiry (seconds since the epoch), a nonce (its single
    use) and a digest of the counted ids. Its MAC covers these, the action and the
    selection as sent."""

    count: int
    since_us: int
    expires: int
    nonce: str
    digest: str

    def sign(self, key: bytes, action: str, given: dict[str, str | None]) -> str:
        since = "-" if self.since_us < 0 else str(self.since_us)
        head = f"{self.count}.{since}.{self.expires}.{self.nonce}.{self.digest}"
        return f"{head}.{_mac(key, action, given, head)}"

    @classmethod
    def verify(
        cls, key: bytes, token: object, action: str, given: dict[str, str | None], now: datetime
    ) -> _Ticket:
        """The ticket of a token signed for this action and selection, not expired;
        InvalidInput (naming `confirm`) otherwise."""
        parts = token.split(".") if isinstance(token, str) and key else []
        sent = parts[-1].encode("utf-8", "surrogatepass") if parts else b""
        if len(parts) != 6 or not hmac.compare_digest(
            _mac(key, action, given, ".".join(parts[:5])).encode(), sent
        ):
            raise InvalidInput(
                "confirm is not the token a count of this selection answered; count again",
                "confirm",
            )
        count, since, expires, nonce, digest = parts[:5]
        ticket = cls(
            params.integer(count, "confirm", low=0, high=10**9),
            -1 if since == "-" else params.integer(since, "confirm", low=0, high=10**17),
            params.integer(expires, "confirm", low=0, high=10**11),
            nonce,
            digest,
        )
        if now.timestamp() > ticket.expires:
            minutes = CONFIRM_TTL.total_seconds() / 60
            raise InvalidInput(
                f"confirm expired (a count's token lasts {minutes:g} minutes); count again",
                "confirm",
            )
        return ticket


_USED = "confirm was used already: a count's token acts once; count again"


def _used(ctx: Context, ticket: _Ticket) -> bool:
    try:
        ctx.store.read_blob(USED_PREFIX + ticket.nonce)
    except NotFound:
        return False
    return True


def _use(ctx: Context, ticket: _Ticket, by: str) -> None:
    """Spend a token: its create-only marker, before anything acts (two confirms of one
    token at once: one acts, the other is refused)."""
    at = job_queue.format_time(ctx.clock())
    marker = json.dumps({"by": by, "at": at, "n": secrets.token_hex(8)})  # never twice alike
    try:
        ctx.store.put_blob(USED_PREFIX + ticket.nonce, marker.encode(), generation=0)
    except AlreadyExists:
        raise InvalidInput(_USED, "confirm") from None


def _key(ctx: Context, *, create: bool = True) -> bytes:
    """The deployment's confirm key, read once per process; created on first use by a
    count (`create`). Without it no token was ever signed: b"" then, which verifies none."""
    bucket = ctx.settings.records_bucket
    with _keys_lock:
        if bucket not in _keys:
            try:
                _keys[bucket] = ctx.store.read_blob(CONFIRM_KEY_OBJECT).data
            except NotFound:
                if not create:
                    return b""
                # another instance may make it first (AlreadyExists): use theirs
                with contextlib.suppress(AlreadyExists):
                    key = secrets.token_bytes(_KEY_BYTES)
                    ctx.store.put_blob(CONFIRM_KEY_OBJECT, key, generation=0)
                _keys[bucket] = ctx.store.read_blob(CONFIRM_KEY_OBJECT).data
        return _keys[bucket]


def _mac(key: bytes, action: str, given: dict[str, str | None], head: str) -> str:
    shown = json.dumps([action, [given.get(k) for k in _SELECTION_KEYS], head])
    return hmac.new(key, shown.encode(), hashlib.sha256).hexdigest()[:_MAC_CHARS]


def _ids_digest(chosen: list[JobRecord]) -> str:
    ids = sorted(str(r.get("id")) for r in chosen)
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:_DIGEST_CHARS]


_SELECTION_KEYS = ("batch", "status", "pipeline", "since")


def _given(body: dict[str, Any]) -> dict[str, str | None]:
    """The selection as sent (an empty or null value is no filter)."""
    return {k: (body.get(k) or None) for k in _SELECTION_KEYS}


def _micros(at: datetime | None) -> int:
    return -1 if at is None else round(at.timestamp() * 1_000_000)


def _from_micros(micros: int) -> datetime | None:
    if micros < 0:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


def check_keys(body: dict[str, Any], allowed: dict[str, int]) -> None:
    """Only the allowed keys, each a string no longer than its limit (null: absent): a bulk
    body, or the body of one job's action."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidInput(f"unknown keys {', '.join(k[:40] for k in unknown[:5])}", "request")
    for key, longest in allowed.items():
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= longest):
            raise InvalidInput(f"{key} must be a string of 1 to {longest} characters", key)
        if isinstance(value, str) and not _is_unicode(value):
            raise InvalidInput(f"{key} has text that is not valid Unicode (a lone surrogate)", key)


def _is_unicode(text: str) -> bool:
    """False for a lone surrogate (JSON's "\\ud800"): no record could store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _selector(body: dict[str, Any], now: datetime) -> Selector:
    raw_status = body.get("status")
    try:
        job_status = JobStatus(raw_status) if raw_status else None
    except ValueError:
        raise InvalidInput(
            f"status {str(raw_status)[:40]!r} is not a job status", "status"
        ) from None
    return Selector(
        batch=body.get("batch") or None,
        status=job_status,
        pipeline=body.get("pipeline") or None,
        since=parse_since(body["since"], now) if body.get("since") else None,
    )
