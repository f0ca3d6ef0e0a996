"""Helpers of the CLI tests: run `reclaim` as a subprocess, observe the doorbell,
move jobs on as an owner would (through the seam, with the policy builders)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shared import job_queue
from shared.stores.gcs import GcsStore

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    """One CLI run."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Cloud:
    """The names one test module uses, and helpers to run and observe the CLI."""

    env: dict[str, str]
    project: str
    bucket: str
    store: GcsStore
    subscriber: Any
    publisher: Any
    doorbells: str  # pull subscription on the jobs topic: what the CLI rang
    dead_letter_topic: str
    dead_letter_subscription: str

    def run(
        self, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
    ) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "reclaim.cli", *args],
            env=env or self.env,
            cwd=ROOT,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def ok(self, *args: str, stdin: str | None = None) -> Result:
        result = self.run(*args, stdin=stdin)
        assert result.code == 0, f"reclaim {' '.join(args)} -> {result.code}\n{result.err}"
        return result

    def rung(self, want: int = 1, deadline_s: float = 10.0) -> list[str]:
        """Job ids of the doorbells rung since the last call (acked)."""
        got: list[str] = []
        end = time.monotonic() + deadline_s
        while len(got) < want and time.monotonic() < end:
            resp = self.subscriber.pull(
                request={"subscription": self.doorbells, "max_messages": 50}, timeout=5
            )
            if resp.received_messages:
                self.subscriber.acknowledge(
                    request={
                        "subscription": self.doorbells,
                        "ack_ids": [m.ack_id for m in resp.received_messages],
                    }
                )
            got += [json.loads(m.message.data)["job_id"] for m in resp.received_messages]
        return got

    def drive(self, job_id: str, outcome: str) -> dict[str, Any]:
        """Take the job to running, then done or failed, through the seam as an owner would."""
        now = datetime.now(UTC)
        stored = self.store.read(job_id)
        job = stored.record
        if job["status"] == "queued":
            job = {**job, **job_queue.claim_fields(job, "test-owner", now)}
            stored = self.store.update(job, stored.generation)
            job = stored.record
        if outcome == "running":
            return job
        if outcome == "done":
            fields = job_queue.done_fields(job, now, {"ok": True})
        else:
            error = job_queue.error_info(
                ValueError("piece 7 is not a garment"),
                stage="render",
                attempt=job_queue.attempts_of(job),
                now=now,
                retryable=False,
            )
            fields = job_queue.fail_fields(job, now, error)
        stored = self.store.update({**job, **fields}, stored.generation)
        self.store.remove_pending(job_id)
        return stored.record
