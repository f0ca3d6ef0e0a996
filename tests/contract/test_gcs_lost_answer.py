"""GcsStore when an answer is lost: the client's own retry, 412, and write_id fencing.

A FlakyProxy sits between the official client and fake-gcs-server and turns
one upload's answer into 503 (after or before forwarding it), so the client
retries its generation-matched upload by itself, as it does in production.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shared.errors import LostRace, Unavailable
from shared.stores.gcs import GcsStore, default_retry
from tests.contract.contract_support import make_gcs_client, new_job
from tests.contract.flaky_proxy import Fault, FlakyProxy


@pytest.fixture
def setup(gcs_server: str) -> Iterator[tuple[GcsStore, GcsStore, FlakyProxy]]:
    """(direct store, store behind the flaky proxy, proxy) on one fresh bucket."""
    direct_client = make_gcs_client(gcs_server)
    bucket = direct_client.create_bucket(f"lost-{uuid.uuid4().hex[:12]}")
    with FlakyProxy(gcs_server) as proxy:
        flaky = GcsStore(bucket.name, make_gcs_client(proxy.url))
        yield GcsStore(bucket.name, direct_client), flaky, proxy


def test_update_whose_answer_was_lost_is_recognised_as_ours(setup: Any) -> None:
    direct, flaky, proxy = setup
    created = direct.create(new_job())
    proxy.add_fault(Fault(forward=True))  # commit it, then answer 503

    result = flaky.update({**created.record, "owner": "me", "attempts": 1}, created.generation)

    assert proxy.uploads == [503, 412]  # the client retried by itself and got 412
    assert result.record["owner"] == "me"
    assert direct.read(created.record["id"]) == result
    assert flaky.calls == {"write": 1, "read": 1}


def test_create_whose_answer_was_lost_is_recognised_as_ours(setup: Any) -> None:
    direct, flaky, proxy = setup
    job = new_job()
    proxy.add_fault(Fault(forward=True))

    result = flaky.create(job)

    assert proxy.uploads == [503, 412]
    assert direct.read(job["id"]) == result


def test_a_412_after_someone_else_wrote_is_still_a_lost_race(setup: Any) -> None:
    direct, flaky, proxy = setup
    created = direct.create(new_job())
    job_id = created.record["id"]

    def rival_writes_after_us() -> None:
        ours = direct.read(job_id)
        direct.update({**ours.record, "owner": "rival"}, ours.generation)

    proxy.add_fault(Fault(forward=True, after_forward=rival_writes_after_us))
    with pytest.raises(LostRace):
        flaky.update({**created.record, "owner": "me"}, created.generation)
    assert proxy.uploads == [503, 412]
    assert direct.read(job_id).record["owner"] == "rival"


def test_an_upload_that_never_arrived_is_retried_and_lands_once(setup: Any) -> None:
    direct, flaky, proxy = setup
    created = direct.create(new_job())
    proxy.add_fault(Fault(forward=False))  # 503 without committing

    result = flaky.update({**created.record, "owner": "me"}, created.generation)

    assert proxy.uploads == [503, 200]
    assert direct.read(created.record["id"]) == result


def test_markers_and_outputs_survive_a_lost_answer(setup: Any) -> None:
    direct, flaky, proxy = setup
    proxy.add_fault(Fault(forward=True))
    flaky.add_pending("job-x")
    proxy.add_fault(Fault(forward=True))
    name = flaky.write_output("job-x", 1, "out.txt", b"hello", "text/plain")

    assert proxy.uploads == [503, 412, 503, 412]
    assert [e.job_id for e in direct.list_pending()] == ["job-x"]
    assert direct.read_object(direct.bucket_name, name) == (b"hello", "text/plain")


def test_a_storage_outage_ends_in_unavailable_within_the_retry_budget(
    setup: Any, gcs_server: str
) -> None:
    direct, _, proxy = setup
    created = direct.create(new_job())
    impatient = GcsStore(
        direct.bucket_name,
        make_gcs_client(proxy.url),
        # the first retry sleeps below the library's first delay (1 s): within 3 s there is one
        retry=default_retry().with_timeout(3.0),
    )
    for _ in range(50):
        proxy.add_fault(Fault(forward=False))

    with pytest.raises(Unavailable):
        impatient.update({**created.record, "owner": "me"}, created.generation)

    assert len(proxy.uploads) >= 2 and set(proxy.uploads) == {503}
    assert direct.read(created.record["id"]) == created
