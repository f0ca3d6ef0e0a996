"""Terminal records carry a custom time so the bucket's lifecycle rule can expire them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared import job_queue, records
from shared.storage import job_object
from shared.stores.gcs import GcsStore


def test_terminal_record_gets_custom_time_pending_does_not(gcs_client, bucket):
    store = GcsStore(bucket.name, gcs_client, retention_days={"done": 30, "failed": 90})
    now = datetime.now(UTC)
    stored = store.create(records.new_record("ret-1", "demo", {}, now))
    assert bucket.get_blob(job_object("ret-1")).custom_time is None

    running = {**stored.record, **job_queue.claim_fields(stored.record, "o", now)}
    stored = store.update(running, stored.generation)
    assert bucket.get_blob(job_object("ret-1")).custom_time is None

    done = {**stored.record, **job_queue.done_fields(stored.record, now, {"ok": True})}
    store.update(done, stored.generation)
    custom = bucket.get_blob(job_object("ret-1")).custom_time
    assert custom is not None
    assert timedelta(days=29) < custom - now < timedelta(days=31)


def test_no_retention_configured_means_no_custom_time(gcs_client, bucket):
    store = GcsStore(bucket.name, gcs_client)
    now = datetime.now(UTC)
    stored = store.create(records.new_record("ret-2", "demo", {}, now))
    failed = {**stored.record, **job_queue.fail_fields(stored.record, now, {"message": "x"})}
    store.update(failed, stored.generation)
    assert bucket.get_blob(job_object("ret-2")).custom_time is None
