"""fake-gcs-server honours the generation preconditions the seam is built on,
seen through the official client (412 = PreconditionFailed)."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core.exceptions import PreconditionFailed


def test_create_only_write_gives_412_when_the_object_exists(bucket: Any) -> None:
    bucket.blob("jobs/a.json").upload_from_string(b"{}", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        bucket.blob("jobs/a.json").upload_from_string(b'{"b": 1}', if_generation_match=0)
    assert bucket.blob("jobs/a.json").download_as_bytes() == b"{}"


def test_generation_matched_write_gives_412_on_a_stale_generation(bucket: Any) -> None:
    first = bucket.blob("jobs/b.json")
    first.upload_from_string(b"1", if_generation_match=0)
    second = bucket.blob("jobs/b.json")
    second.upload_from_string(b"2", if_generation_match=first.generation)
    assert second.generation != first.generation
    with pytest.raises(PreconditionFailed):
        bucket.blob("jobs/b.json").upload_from_string(b"3", if_generation_match=first.generation)
    assert bucket.blob("jobs/b.json").download_as_bytes() == b"2"
