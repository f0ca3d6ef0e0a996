"""The topology as data: names, push endpoints and delivery settings (pure)."""

from __future__ import annotations

import pytest

from reclaim.local import wiring


def _by_name(t: wiring.Topology) -> dict[str, wiring.SubscriptionSpec]:
    return {s.name: s for s in t.subscriptions}


def test_names_match_the_contract():
    t = wiring.Topology()
    assert t.topics == ("reclaim-jobs", "reclaim-uploads", "reclaim-dead-letter")
    subs = _by_name(t)
    assert set(subs) == {"reclaim-claim", "reclaim-submit-upload", "reclaim-dead-letter-hold"}
    assert (subs["reclaim-claim"].topic, subs["reclaim-claim"].push_function) == (
        "reclaim-jobs",
        "claim",
    )
    assert (subs["reclaim-submit-upload"].topic, subs["reclaim-submit-upload"].push_function) == (
        "reclaim-uploads",
        "submit_upload",
    )
    hold = subs["reclaim-dead-letter-hold"]
    assert (hold.topic, hold.push_function, hold.dead_letter_topic) == (
        "reclaim-dead-letter",
        None,
        None,
    )


def test_push_request_carries_endpoint_retry_and_dead_letter():
    t = wiring.Topology(project="p1", min_backoff_seconds=2, max_backoff_seconds=20)
    spec = _by_name(t)["reclaim-claim"]
    req = wiring.subscription_request(t, spec, {"claim": "http://127.0.0.1:9000/"})
    assert req["name"] == "projects/p1/subscriptions/reclaim-claim"
    assert req["topic"] == "projects/p1/topics/reclaim-jobs"
    # functions-framework builds the CloudEvent source from this path.
    assert req["push_config"]["push_endpoint"] == (
        "http://127.0.0.1:9000/projects/p1/topics/reclaim-jobs"
    )
    assert req["ack_deadline_seconds"] == wiring.CLAIM_ACK_DEADLINE_SECONDS
    assert req["retry_policy"] == {
        "minimum_backoff": {"seconds": 2},
        "maximum_backoff": {"seconds": 20},
    }
    assert req["dead_letter_policy"] == {
        "dead_letter_topic": "projects/p1/topics/reclaim-dead-letter",
        "max_delivery_attempts": wiring.MAX_DELIVERY_ATTEMPTS,
    }


def test_pull_request_has_no_push_or_policies():
    t = wiring.Topology()
    req = wiring.subscription_request(t, _by_name(t)["reclaim-dead-letter-hold"], {})
    assert "push_config" not in req and "retry_policy" not in req
    assert "dead_letter_policy" not in req


def test_missing_function_url_is_an_error():
    t = wiring.Topology()
    with pytest.raises(ValueError, match="submit_upload"):
        wiring.subscription_request(t, _by_name(t)["reclaim-submit-upload"], {"claim": "x"})


def test_production_differs_only_in_backoff():
    prod, local = wiring.production(), wiring.Topology()
    assert (prod.min_backoff_seconds, prod.max_backoff_seconds) == (
        wiring.PROD_MIN_BACKOFF_SECONDS,
        wiring.PROD_MAX_BACKOFF_SECONDS,
    )
    assert local.min_backoff_seconds < prod.min_backoff_seconds
    same = (
        "claim_ack_deadline_seconds",
        "submit_upload_ack_deadline_seconds",
        "max_delivery_attempts",
        "topics",
        "buckets",
    )
    assert all(getattr(prod, k) == getattr(local, k) for k in same)


@pytest.mark.parametrize(
    "bad",
    [
        {"claim_ack_deadline_seconds": 5},
        {"submit_upload_ack_deadline_seconds": 601},
        {"min_backoff_seconds": 30, "max_backoff_seconds": 10},
        {"max_delivery_attempts": 4},
        {"uploads_bucket": "reclaim-records"},
        {"project": "a/b"},
        {"jobs_topic": ""},
    ],
)
def test_invalid_topology_is_rejected(bad):
    with pytest.raises(ValueError):
        wiring.Topology(**bad)


def test_shard_buckets_are_created_and_told_to_every_function() -> None:
    t = wiring.Topology(shard_buckets=("reclaim-records-1", "reclaim-records-2"))
    assert t.records_buckets == ("reclaim-records", "reclaim-records-1", "reclaim-records-2")
    assert set(t.records_buckets) < set(t.buckets)
    assert t.records_env() == {
        "RECLAIM_RECORDS_BUCKET": "reclaim-records",
        "RECLAIM_SHARD_BUCKETS": "reclaim-records-1,reclaim-records-2",
    }
    assert wiring.Topology().records_env()["RECLAIM_SHARD_BUCKETS"] == ""


@pytest.mark.parametrize(
    "shards", [("reclaim-records",), ("x", "x"), ("reclaim-uploads",), ("bad name",)]
)
def test_shard_buckets_that_repeat_or_collide_are_refused(shards: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        wiring.Topology(shard_buckets=shards)


def test_the_test_switch_gives_every_test_cloud_its_shards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reclaim.local.cloud import TEST_SHARDS_ENV, LocalCloud

    monkeypatch.setenv(TEST_SHARDS_ENV, "3")
    assert LocalCloud.for_tests().topology.shard_buckets == (
        "reclaim-records-shard-1",
        "reclaim-records-shard-2",
    )
    named = LocalCloud.for_tests(shard_buckets=("mine",))  # a test that names its own wins
    assert named.topology.shard_buckets == ("mine",)
    monkeypatch.setenv(TEST_SHARDS_ENV, "two")
    with pytest.raises(ValueError, match=TEST_SHARDS_ENV):
        LocalCloud.for_tests()
    monkeypatch.delenv(TEST_SHARDS_ENV)
    assert LocalCloud.for_tests().topology.shard_buckets == ()
