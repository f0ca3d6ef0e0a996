"""Retries on time: a doorbell that meets a job backing off waits for it inside its push.

A stage error requeues its job with a backoff (job_queue.backoff_seconds: its not_before).
Until issue 40 only a retry due at once was rung; a delayed one waited for the sweep's
staleness rule or a freed slot's drain, 30 s locally and minutes on GCP. Nothing on the
platform rings it on time by itself:

- Pub/Sub has no per-message delay: a subscription's retry policy backs off a message the
  endpoint refused, between a minimum and a maximum set for the whole subscription and
  "on a best effort basis" (https://cloud.google.com/pubsub/docs/handling-failures), and a
  refusal counts towards the dead-letter policy's delivery attempts;
- Cloud Scheduler's finest schedule is once a minute (unix-cron's minute field,
  https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules), so the sweep
  alone is up to a minute late, plus its own run;
- but a push may last up to the subscription's ack deadline: "for push delivery, this
  value is used to set the request timeout for the call to the push endpoint"
  (ackDeadlineSeconds, https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions),
  600 s at most, and terraform keeps the claim function's timeout at least that long
  (shared.claim.budget).

So a delivery that finds its job queued and due within Settings.retry_wait_seconds (90 s
by default) does not ack it as "backing off": it sleeps until the job's not_before, holding
its slot and its push, then reads the record again and claims it (a CAS, as ever: a
duplicate doorbell that waited too loses the race and acks). Who rings such a doorbell:

- a retry whose backoff is at most the window is rung at once by the owner that requeued
  it (shared.claim.runner), so the claim that receives it waits out the backoff;
- a longer backoff is rung by the sweep once the job is due within the window
  (shared.recovery.ring_ahead; the sweep runs every minute, so a window longer than a
  minute always finds one run in time), so no push is held for the long part of it;
- either way the job's pending marker is marked due at its not_before (mark_due), so a
  slot freed anywhere after that takes it from the pending listing whatever became of the
  doorbell (shared.claim.drain), and the staleness rule stays the last net.

The cost: each waiting retry holds one of an instance's concurrent requests for at most
the window, billed as request time (https://cloud.google.com/run/docs/configuring/billing-settings).
A shutdown cuts the wait short and passes the delivery on (its doorbell rung again).
RECLAIM_RETRY_WAIT_SECONDS=0 turns it off: retries then wait for the drain and the sweep.
"""

from __future__ import annotations

from datetime import datetime

from shared import job_queue
from shared.claim.budget import PushBudget
from shared.config import Settings
from shared.jobs import JobRecord

RETRY_MARGIN_S = 2.0
"""What a retry rung in time may start later than its not_before: a wake-up, a read and
the claim's CAS write, tens of milliseconds on an idle instance. It holds while the
claim has a free slot for the doorbell (with every slot busy, Cloud Run holds and then
refuses the push, and the job waits for a freed slot: shared.claim.drain). Tests assert
it from the record's history; `make bench`'s retry rows measure it."""

WAITS_MAX = 3
"""Waits one delivery may take for its job: the first is the backoff; the others cover a
clock that reads a hair behind the one that set not_before (the requeuing instance's)."""


def wait_seconds(
    job: JobRecord, now: datetime, settings: Settings, budget: PushBudget
) -> float | None:
    """How long this push should wait for `job` to become claimable (None: not at all):
    queued, backing off, due within Settings.retry_wait_seconds and within what the push's
    budget leaves for waiting (its deadline less Settings.drain_job_seconds for the run)."""
    window = min(settings.retry_wait_seconds, budget.remaining() - settings.drain_job_seconds)
    if window <= 0:
        return None
    max_attempts = job_queue.max_attempts_of(job, settings.max_attempts)
    return job_queue.due_within(job, now, window, max_attempts, skew_s=settings.clock_skew_seconds)


def rung_at_requeue(delay_s: float, settings: Settings) -> bool:
    """Whether the owner that requeues a job with this backoff rings it at once: due now,
    or due soon enough for the claim that receives the doorbell to wait for it."""
    return delay_s <= settings.retry_wait_seconds
