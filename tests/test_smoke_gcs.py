"""The GCS fixture serves the official client (create-only gives 412)."""

import pytest
from google.api_core.exceptions import PreconditionFailed


def test_create_only_conflict(bucket):
    blob = bucket.blob("a.json")
    blob.upload_from_string(b"{}", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        bucket.blob("a.json").upload_from_string(b"{}", if_generation_match=0)
