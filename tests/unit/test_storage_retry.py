"""The storage retry starts no sooner than the client library's own: Cloud Storage
takes about one write per second to one object name
(https://cloud.google.com/storage/quotas), so a 429 retried sooner meets it again."""

from __future__ import annotations

from google.api_core import exceptions as gexc
from google.api_core.retry import retry_base
from google.cloud.storage.retry import DEFAULT_RETRY

from shared.stores import gcs as storage


def test_retry_keeps_the_librarys_first_delay_and_growth() -> None:
    ours = storage.default_retry()
    # google-cloud-storage's DEFAULT_RETRY keeps google-api-core's defaults
    # (google/api_core/retry/retry_base.py: _DEFAULT_INITIAL_DELAY = 1.0,
    # _DEFAULT_DELAY_MULTIPLIER = 2.0)
    assert DEFAULT_RETRY._initial == retry_base._DEFAULT_INITIAL_DELAY
    assert ours._initial >= DEFAULT_RETRY._initial
    assert ours._multiplier >= DEFAULT_RETRY._multiplier
    assert ours._maximum >= ours._initial  # the first delay is not cut short by the cap
    assert ours._predicate is DEFAULT_RETRY._predicate
    assert ours._predicate(gexc.TooManyRequests("slow down"))
    assert not ours._predicate(gexc.PreconditionFailed("412 is never retried blindly"))
    assert ours.timeout == storage.RETRY_DEADLINE_S
