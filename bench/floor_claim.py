"""The throughput row's floor: the least a claim function can do with a doorbell, served
the way reclaim's is (Pub/Sub push, the local Cloud Run's front, functions-framework, the
same storage client and connection pool): read the job's record, write it running and
then done (each write generation-matched), delete its pending marker. No policy, stage,
heartbeat, drain, flow gate or log line: what reclaim's claim costs beyond this is the
row's ratio. bench/throughput.py deploys it as a local cloud's `claim`; bench/first_stage.py
reads when its claim write landed (where a first stage would start).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from typing import Any

import flask

from shared.config import Settings
from shared.events import job_id_from_delivery, parse_pubsub
from shared.jobs import JobStatus
from shared.shards import shard_of
from shared.storage import job_object, pending_object
from shared.stores.gcs import make_client

STARTED = "stage_started_at"
"""What bench/first_stage.py reads of a floor job (bench.row_pipelines.STARTED: the same
field name a reclaim job's first stage writes), kept literal: the floor imports nothing
of the benchmark."""
_buckets: list[Any] = []


def _records(job_id: str) -> Any:
    """The job's record bucket: the one its id hashes to when there are record shards
    (RECLAIM_SHARD_BUCKETS), as reclaim's store picks it."""
    if not _buckets:
        settings = Settings.from_env(os.environ)
        client = make_client(settings.project)
        _buckets.extend(client.bucket(name) for name in settings.records_buckets)
    return _buckets[shard_of(job_id, len(_buckets))]


def claim(request: flask.Request) -> tuple[str, int]:
    job_id = job_id_from_delivery(parse_pubsub(request))
    bucket = _records(job_id)
    blob = bucket.blob(job_object(job_id))
    record = json.loads(blob.download_as_bytes())
    generation = blob.generation
    for status in (JobStatus.RUNNING, JobStatus.DONE):
        record["status"] = status
        record["updated_at"] = datetime.now(UTC).isoformat()  # when it ended: the rate's clock
        write = bucket.blob(job_object(job_id))
        write.upload_from_string(json.dumps(record), if_generation_match=generation)
        generation = write.generation
        if status == JobStatus.RUNNING:  # claimed: where a first stage would start
            record["result"] = {STARTED: time.time()}  # bench/first_stage.py reads it
    bucket.blob(pending_object(job_id)).delete()
    return "", 200
