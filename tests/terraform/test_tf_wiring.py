"""terraform/ and the local launcher (reclaim/local/wiring.py) deploy the same topology:
names, ack deadlines, retry and dead-letter values."""

from __future__ import annotations

from reclaim.local import wiring
from tests.terraform.tfhcl import config, optional_defaults, unquote, variable_default

PUSH_VARS = {wiring.CLAIM_SUBSCRIPTION: "claim", wiring.SUBMIT_UPLOAD_SUBSCRIPTION: "submit_upload"}


def _seconds(duration: str) -> float:
    assert duration.endswith("s"), duration
    return float(duration[:-1])


def _names(part: str) -> dict[str, str]:
    prefix = unquote(variable_default("name_prefix"))
    return {
        k: unquote(v).replace("${var.name_prefix}", prefix)
        for k, v in config()["locals"][part].items()
    }


def test_topic_and_subscription_names_match_local() -> None:
    prod = wiring.production()
    assert set(_names("topics").values()) == set(prod.topics)
    assert set(_names("subscriptions").values()) == {s.name for s in prod.subscriptions}


def test_push_delivery_settings_match_local_production() -> None:
    topics = _names("topics")
    pushes = config()["locals"]["pushes"]
    for spec in wiring.production().subscriptions:
        if spec.push_function is None:
            continue
        key = PUSH_VARS[spec.name]
        assert spec.push_function == key
        assert topics[unquote(pushes[key]["topic"])] == spec.topic
        tf = optional_defaults(f"{key}_push")
        assert tf["ack_deadline_seconds"] == spec.ack_deadline_seconds, spec.name
        assert _seconds(tf["minimum_backoff"]) == spec.min_backoff_seconds, spec.name
        assert _seconds(tf["maximum_backoff"]) == spec.max_backoff_seconds, spec.name
        assert tf["max_delivery_attempts"] == spec.max_delivery_attempts, spec.name
        assert spec.dead_letter_topic == topics["dead_letter"]


def test_dead_letter_hold_matches_local() -> None:
    hold = config()["resource"]["google_pubsub_subscription"]["dead_letter_hold"]
    spec = next(s for s in wiring.production().subscriptions if s.push_function is None)
    assert spec.name == _names("subscriptions")["dead_letter_hold"]
    assert spec.topic == _names("topics")["dead_letter"]
    assert hold["ack_deadline_seconds"] == spec.ack_deadline_seconds
