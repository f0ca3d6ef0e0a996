"""shared.events against Google's own payloads (tests/events) and broken ones."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cloudevents.conversion import to_binary, to_structured
from cloudevents.http import CloudEvent
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from shared.events import (
    PUBSUB_PUBLISHED,
    STORAGE_FINALIZED,
    BadEvent,
    IgnoredEvent,
    PubsubDelivery,
    UploadedObject,
    job_id_from_delivery,
    parse_pubsub,
    parse_upload,
    pubsub_from_http,
    upload_from_http,
)

EVENTS = Path(__file__).resolve().parent.parent / "events"
JSON = {"Content-Type": "application/json"}


def load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def body(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def b64(obj: Any) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return base64.b64encode(raw).decode()


def request(headers: dict[str, str], data: bytes) -> Request:
    return Request(EnvironBuilder(method="POST", headers=headers, data=data).get_environ())


def binary_event(kind: str, data: dict[str, Any], **attrs: str) -> tuple[dict[str, str], bytes]:
    attributes = {
        "type": kind,
        "source": "//pubsub.googleapis.com/x",
        "datacontenttype": "application/json",
        **attrs,
    }
    event = CloudEvent(attributes, data)
    headers, payload = to_binary(event)
    return dict(headers), payload


def doorbell_envelope(data: Any, attributes: dict[str, str] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"data": b64(data), "messageId": "m-1"}
    if attributes is not None:
        message["attributes"] = attributes
    return {"message": message, "subscription": "projects/p/subscriptions/s"}


# ------------------------------------------------------------------ Pub/Sub


def test_google_text_sample_as_push_envelope() -> None:
    got = pubsub_from_http(JSON, body(load("pubsub-MessagePublishedData-text.json")))
    assert got == PubsubDelivery(
        data=b"test message 3",
        attributes={"attr1": "attr1-value"},
        message_id="message-id",
        publish_time="2021-02-05T04:06:14.109Z",
        delivery_attempt=None,
        subscription="projects/my-project/subscriptions/my-subscription",
    )


def test_google_duplicated_fields_sample() -> None:
    got = pubsub_from_http(JSON, body(load("pubsub-MessagePublishedData-duplicatedFields.json")))
    assert got.data == b"\x01\x02\x03\x04"
    assert got.message_id == "message-id"
    assert got.attributes == {}


def test_push_envelope_with_delivery_attempt_via_flask_request() -> None:
    raw = body(load("pubsub-push-envelope-doorbell.json"))
    got = parse_pubsub(request(JSON, raw))
    assert got.delivery_attempt == 2
    assert got.subscription == "projects/reclaim-local/subscriptions/reclaim-claim"
    assert job_id_from_delivery(got) == "a1b2c3d4e5f60718293a4b5c6d7e8f90"


def test_binary_cloudevent_message_published() -> None:
    data = load("pubsub-MessagePublishedData-text.json")
    headers, raw = binary_event(PUBSUB_PUBLISHED, data, id="ce-42")
    assert "ce-id" in headers and "content-type" in headers
    got = parse_pubsub(request(headers, raw))
    assert got.data == b"test message 3"
    assert got.message_id == "message-id"


def test_binary_cloudevent_without_message_id_uses_ce_id() -> None:
    headers, raw = binary_event(
        PUBSUB_PUBLISHED, {"message": {"data": b64({"job_id": "j1"})}}, id="ce-77"
    )
    got = pubsub_from_http(headers, raw)
    assert got.message_id == "ce-77"
    assert job_id_from_delivery(got) == "j1"


def test_structured_cloudevent_message_published() -> None:
    event = CloudEvent(
        {"type": PUBSUB_PUBLISHED, "source": "s", "id": "i"}, doorbell_envelope({"job_id": "job-9"})
    )
    headers, raw = to_structured(event)
    assert headers["content-type"] == "application/cloudevents+json"
    got = pubsub_from_http(dict(headers), raw)
    assert job_id_from_delivery(got) == "job-9"


def test_job_id_from_attribute_only() -> None:
    got = pubsub_from_http(JSON, body(doorbell_envelope(b"", {"job_id": "only-attr"})))
    assert job_id_from_delivery(got) == "only-attr"


@pytest.mark.parametrize(
    ("data", "attributes", "reason"),
    [
        ({"job_id": "a"}, {"job_id": "b"}, "differ"),
        (b"", None, "no job_id"),
        ({"job_id": "../etc"}, None, "invalid"),
        ({"job_id": "a/b"}, None, "invalid"),
        ({"job_id": 7}, None, "must be a string"),
        ([1, 2], None, "JSON object"),
        (b"\xff not json", None, "not JSON"),
    ],
)
def test_job_id_rejects(data: Any, attributes: dict[str, str] | None, reason: str) -> None:
    got = pubsub_from_http(JSON, body(doorbell_envelope(data, attributes)))
    with pytest.raises(BadEvent, match=reason):
        job_id_from_delivery(got)


@pytest.mark.parametrize(
    ("headers", "raw", "reason"),
    [
        (JSON, b"", "empty"),
        (JSON, b"{not json", "not valid JSON"),
        (JSON, b"[1]", "JSON object"),
        (JSON, b"{}", "no 'message'"),
        (JSON, body({"message": "x"}), "no 'message'"),
        (JSON, body({"message": {"data": "!!!", "messageId": "1"}}), "base64"),
        (JSON, body({"message": {"data": 5, "messageId": "1"}}), "base64 string"),
        (JSON, body({"message": {"attributes": {"a": 1}, "messageId": "1"}}), "attributes"),
        (JSON, body({"message": {"attributes": [], "messageId": "1"}}), "attributes"),
        (JSON, body({"message": {"publishTime": "yesterday", "messageId": "1"}}), "Pub/Sub"),
        (JSON, body({"message": {"data": ""}}), "messageId"),
        ({"ce-specversion": "1.0", "ce-type": PUBSUB_PUBLISHED}, b"{}", "ce-source, ce-id"),
        (
            {"Content-Type": "application/cloudevents+json"},
            b'{"specversion": "1.0"}',
            "not a valid CloudEvent",
        ),
        ({"Content-Type": "application/cloudevents-batch+json"}, b"[]", "batched"),
    ],
)
def test_pubsub_rejects(headers: dict[str, str], raw: bytes, reason: str) -> None:
    with pytest.raises(BadEvent, match=reason) as info:
        pubsub_from_http(headers, raw)
    assert info.value.reason


def test_cloudevent_of_other_type_is_bad_for_pubsub() -> None:
    headers, raw = binary_event(
        STORAGE_FINALIZED, load("storage-StorageObjectData-complex.json"), id="1"
    )
    with pytest.raises(BadEvent, match="is not"):
        pubsub_from_http(headers, raw)


def test_cloudevent_with_non_json_data_is_bad() -> None:
    headers = {
        "ce-specversion": "1.0",
        "ce-type": PUBSUB_PUBLISHED,
        "ce-source": "s",
        "ce-id": "1",
        "content-type": "application/json",
    }
    with pytest.raises(BadEvent, match="not valid JSON"):
        pubsub_from_http(headers, b"plain words")


# ------------------------------------------------------------------ Storage


def test_gcs_notification_push_json_api_v1() -> None:
    raw = body(load("gcs-notification-push-JSON_API_V1.json"))
    got = parse_upload(request(JSON, raw))
    assert got == UploadedObject(
        bucket="reclaim-uploads",
        name="incoming/report 2026.csv",
        generation=1764493200123456,
        content_type="text/csv",
        size=5120,
    )


def test_gcs_notification_without_payload() -> None:
    envelope = load("gcs-notification-push-JSON_API_V1.json")
    envelope["message"]["attributes"]["payloadFormat"] = "NONE"
    envelope["message"].pop("data")
    got = upload_from_http(JSON, body(envelope))
    assert (got.bucket, got.name, got.generation) == (
        "reclaim-uploads",
        "incoming/report 2026.csv",
        1764493200123456,
    )
    assert got.content_type is None and got.size is None


def test_gcs_notification_as_eventarc_message_published() -> None:
    envelope = load("gcs-notification-push-JSON_API_V1.json")
    headers, raw = binary_event(PUBSUB_PUBLISHED, envelope, id="e-1")
    got = upload_from_http(headers, raw)
    assert got.name == "incoming/report 2026.csv"


def test_eventarc_storage_finalized_google_sample() -> None:
    headers, raw = binary_event(
        STORAGE_FINALIZED,
        load("storage-StorageObjectData-complex.json"),
        id="e-2",
        subject="objects/MyFile",
    )
    got = parse_upload(request(headers, raw))
    assert got == UploadedObject("sample-bucket", "MyFile", 96883251, "esse commodo", 0)


def test_eventarc_storage_int64_fields_as_strings() -> None:
    data = load("storage-StorageObjectData-complex.json")
    data.update(generation="96883251", size="77", metageneration="1")
    headers, raw = binary_event(STORAGE_FINALIZED, data, id="e-3")
    got = upload_from_http(headers, raw)
    assert (got.generation, got.size) == (96883251, 77)


def test_eventarc_storage_event_with_odd_unused_field_still_parses() -> None:
    data = load("storage-StorageObjectData-complex.json")
    data["timeCreated"] = "not a time"
    headers, raw = binary_event(STORAGE_FINALIZED, data, id="e-4")
    assert upload_from_http(headers, raw).name == "MyFile"


@pytest.mark.parametrize(
    "event_type", ["OBJECT_DELETE", "OBJECT_ARCHIVE", "OBJECT_METADATA_UPDATE"]
)
def test_other_gcs_notifications_are_ignored(event_type: str) -> None:
    envelope = load("gcs-notification-push-JSON_API_V1.json")
    envelope["message"]["attributes"]["eventType"] = event_type
    with pytest.raises(IgnoredEvent, match=event_type):
        upload_from_http(JSON, body(envelope))


def test_other_storage_cloudevents_are_ignored() -> None:
    headers, raw = binary_event(
        "google.cloud.storage.object.v1.deleted",
        load("storage-StorageObjectData-complex.json"),
        id="e-5",
    )
    with pytest.raises(IgnoredEvent):
        upload_from_http(headers, raw)


def _notification(**changes: Any) -> bytes:
    envelope = load("gcs-notification-push-JSON_API_V1.json")
    attrs = envelope["message"]["attributes"]
    resource = json.loads(base64.b64decode(envelope["message"]["data"]))
    for key, value in changes.items():
        target, _, field = key.partition("__")
        box = attrs if target == "attr" else resource
        if value is None:
            box.pop(field, None)
        else:
            box[field] = value
    envelope["message"]["data"] = b64(resource)
    return body(envelope)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"attr__eventType": None}, "no eventType"),
        ({"attr__payloadFormat": "XML"}, "payloadFormat"),
        ({"attr__objectGeneration": "12"}, "disagrees"),
        ({"attr__bucketId": "other"}, "disagrees"),
        ({"attr__objectGeneration": "abc", "data__generation": None}, "storage object"),
        ({"attr__objectGeneration": None, "data__generation": None}, "generation"),
        ({"attr__objectId": None, "data__name": None}, "no bucket and object"),
        ({"data__size": "-3"}, "negative size"),
    ],
)
def test_upload_rejects(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadEvent, match=reason):
        upload_from_http(JSON, _notification(**changes))


def test_upload_rejects_non_object_notification_data() -> None:
    envelope = load("gcs-notification-push-JSON_API_V1.json")
    envelope["message"]["data"] = b64([1, 2])
    with pytest.raises(BadEvent, match="JSON object"):
        upload_from_http(JSON, body(envelope))


def test_upload_rejects_unrelated_cloudevent() -> None:
    headers, raw = binary_event("com.example.thing", {"a": 1}, id="x")
    with pytest.raises(BadEvent, match="neither"):
        upload_from_http(headers, raw)


def test_upload_rejects_storage_event_without_generation() -> None:
    data = load("storage-StorageObjectData-complex.json")
    del data["generation"]
    headers, raw = binary_event(STORAGE_FINALIZED, data, id="e-6")
    with pytest.raises(BadEvent, match="generation"):
        upload_from_http(headers, raw)


# ------------------------------------------------------------------ fuzz

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
_envelope = st.fixed_dictionaries(
    {
        "message": st.fixed_dictionaries(
            {},
            optional={
                "data": st.text(max_size=30) | st.integers(),
                "messageId": _json,
                "attributes": st.dictionaries(st.text(max_size=10), _json, max_size=4),
                "publishTime": st.text(max_size=30),
            },
        )
    },
    optional={"subscription": _json, "deliveryAttempt": _json},
)
_headers = st.sampled_from(
    [
        JSON,
        {
            "ce-specversion": "1.0",
            "ce-type": PUBSUB_PUBLISHED,
            "ce-source": "s",
            "ce-id": "1",
            "content-type": "application/json",
        },
        {
            "ce-specversion": "1.0",
            "ce-type": STORAGE_FINALIZED,
            "ce-source": "s",
            "ce-id": "1",
            "content-type": "application/json",
        },
        {"content-type": "application/cloudevents+json"},
    ]
)


@settings(max_examples=300, deadline=None)
@given(headers=_headers, payload=_json | _envelope, raw=st.none() | st.binary(max_size=40))
def test_no_input_escapes_as_anything_but_bad_or_ignored(
    headers: dict[str, str], payload: Any, raw: bytes | None
) -> None:
    data = raw if raw is not None else json.dumps(payload).encode()
    for parse in (pubsub_from_http, upload_from_http):
        try:
            got = parse(headers, data)
        except (BadEvent, IgnoredEvent) as exc:
            assert exc.reason
            continue
        if isinstance(got, PubsubDelivery):
            try:
                job_id_from_delivery(got)
            except BadEvent as exc:
                assert exc.reason
