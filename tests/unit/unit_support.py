"""A doorbell that records what it rang, for the pure-logic tests (the real
doorbell is tested against the Pub/Sub emulator in tests/integration)."""

from __future__ import annotations

from collections.abc import Iterable

from shared.doorbell import DoorbellError


class Bell:
    """Records rings; can be told to fail."""

    def __init__(self, fail: bool = False) -> None:
        self.rung: list[str] = []
        self.fail = fail

    def ring(self, job_id: str) -> None:
        if self.fail:
            raise DoorbellError(job_id, "down")
        self.rung.append(job_id)

    def ring_many(self, job_ids: Iterable[str]) -> list[str]:
        ids = list(job_ids)
        if self.fail:
            return ids
        self.rung.extend(ids)
        return []
