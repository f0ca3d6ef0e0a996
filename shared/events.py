"""Turn an incoming HTTP request into a typed delivery.

claim and submit_upload are HTTP functions (so they can choose their status
code), fed either by a Pub/Sub PUSH subscription (raw envelope) or by Eventarc
(a CloudEvent, binary or structured). Both shapes end up here, so the rest of
the code sees one `PubsubDelivery` or one `UploadedObject` whatever the wiring.

Anything malformed raises `BadEvent` (the function answers 400 with its
reason); a well-formed storage event we do not act on (delete, archive,
metadata update) raises `IgnoredEvent` (the function acks it with 200).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from cloudevents import exceptions as ce_errors
from cloudevents.http import from_http
from google.events.cloud.pubsub_v1 import MessagePublishedData
from google.events.cloud.storage_v1 import StorageObjectData
from google.protobuf import json_format

from shared import records
from shared.errors import BadEvent, IgnoredEvent, InvalidInput
from shared.submission.upload_routes import Uploaded

PUBSUB_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"
STORAGE_FINALIZED = "google.cloud.storage.object.v1.finalized"
_STORAGE_EVENT_PREFIX = "google.cloud.storage.object.v1."
_GCS_FINALIZE = "OBJECT_FINALIZE"
_BINARY_HEADERS = ("ce-specversion", "ce-type", "ce-source", "ce-id")
# Only these object fields are handed to google-events: an odd timestamp in a
# field we never use must not turn a real upload into a 400.
_OBJECT_FIELDS = ("bucket", "name", "generation", "contentType", "size", "metadata")
_MAX_REASON = 300


class Headers(Protocol):
    """A dict or werkzeug's Headers: anything with items()."""

    def items(self) -> Iterable[tuple[str, str]]: ...


class HttpRequest(Protocol):
    """The part of a Flask request the parsers read."""

    @property
    def headers(self) -> Any: ...

    def get_data(self) -> bytes: ...


@dataclass(frozen=True)
class PubsubDelivery:
    """One Pub/Sub message, however it was delivered."""

    data: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    message_id: str = ""
    publish_time: str | None = None
    delivery_attempt: int | None = None
    subscription: str | None = None

    @property
    def published_at(self) -> datetime | None:
        """publish_time as an aware datetime; None when absent or unreadable."""
        if not self.publish_time:
            return None
        try:
            at = datetime.fromisoformat(self.publish_time)
        except ValueError:
            return None
        return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


UploadedObject = Uploaded
"""One finalized object (and its custom metadata): shared.submission.upload_routes routes it."""


# ---------------------------------------------------------------- public API


def parse_pubsub(request: HttpRequest) -> PubsubDelivery:
    """A Pub/Sub message from a push envelope or a messagePublished CloudEvent."""
    return pubsub_from_http(request.headers, request.get_data())


def parse_upload(request: HttpRequest) -> UploadedObject:
    """A finalized upload from a GCS notification (push or CloudEvent) or an
    Eventarc storage CloudEvent."""
    return upload_from_http(request.headers, request.get_data())


def pubsub_from_http(headers: Headers, body: bytes) -> PubsubDelivery:
    """`parse_pubsub` on plain headers and body (no Flask needed)."""
    event, payload = _unwrap(headers, body)
    if event is None:
        return _delivery(payload)
    if event["type"] != PUBSUB_PUBLISHED:
        raise BadEvent(f"CloudEvent type {event['type']!r} is not {PUBSUB_PUBLISHED!r}")
    return _delivery(payload, fallback_id=str(event["id"]))


def upload_from_http(headers: Headers, body: bytes) -> UploadedObject:
    """`parse_upload` on plain headers and body (no Flask needed)."""
    event, payload = _unwrap(headers, body)
    if event is None:
        return _object_from_notification(_delivery(payload))
    kind = str(event["type"])
    if kind == PUBSUB_PUBLISHED:
        return _object_from_notification(_delivery(payload, fallback_id=str(event["id"])))
    if kind == STORAGE_FINALIZED:
        return _object_from_resource(payload, what="CloudEvent data")
    if kind.startswith(_STORAGE_EVENT_PREFIX):
        raise IgnoredEvent(f"storage event {kind!r} is not a finalized upload")
    raise BadEvent(f"CloudEvent type {kind!r} is neither {STORAGE_FINALIZED!r} nor a notification")


def job_id_from_delivery(delivery: PubsubDelivery) -> str:
    """The job id a doorbell rings for: data {"job_id"} or the job_id attribute."""
    from_data = _job_id_in_data(delivery.data)
    from_attr = delivery.attributes.get("job_id")
    if from_data is not None and from_attr is not None and from_data != from_attr:
        raise BadEvent(f"data job_id {from_data!r} and attribute job_id {from_attr!r} differ")
    job_id = from_data if from_data is not None else from_attr
    if job_id is None:
        raise BadEvent("message carries no job_id (neither in data nor in attributes)")
    try:
        return records.validate_job_id(job_id)
    except InvalidInput as exc:
        raise BadEvent(exc.reason) from None


# ---------------------------------------------------------------- unwrapping


def _unwrap(headers: Headers, body: bytes) -> tuple[Mapping[str, Any] | None, Any]:
    """(CloudEvent attributes or None for a raw envelope, decoded JSON payload)."""
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    content_type = lower.get("content-type", "").split(";")[0].strip().lower()
    if any(k.startswith("ce-") for k in lower):
        missing = [h for h in _BINARY_HEADERS if not lower.get(h)]
        if missing:
            raise BadEvent(f"binary CloudEvent lacks header(s) {', '.join(missing)}")
        return _cloudevent(lower, body)
    if content_type == "application/cloudevents-batch+json":
        raise BadEvent("batched CloudEvents are not supported; send one event per request")
    if content_type == "application/cloudevents+json":
        return _cloudevent(lower, body)
    return None, _json_object(body, what="request body")


def _cloudevent(headers: dict[str, str], body: bytes) -> tuple[Mapping[str, Any], Any]:
    try:
        event = from_http(headers, body)
    except (
        ce_errors.GenericException,
        ValueError,
        TypeError,
        AttributeError,
        RecursionError,
    ) as exc:
        # the SDK lets undecodable bytes and odd JSON shapes escape as plain errors
        raise BadEvent(_short(f"not a valid CloudEvent: {exc}")) from None
    data = event.get_data()
    if isinstance(data, (bytes, bytearray, str)):
        data = _json_object(
            bytes(data, "utf-8") if isinstance(data, str) else bytes(data), what="CloudEvent data"
        )
    if not isinstance(data, dict):
        raise BadEvent("CloudEvent data must be a JSON object")
    attrs = {k: event.get(k) for k in ("type", "source", "id", "subject", "time")}
    return attrs, data


def _json_object(body: bytes, *, what: str) -> dict[str, Any]:
    if not body:
        raise BadEvent(f"{what} is empty")
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadEvent(_short(f"{what} is not valid JSON: {exc}")) from None
    if not isinstance(value, dict):
        raise BadEvent(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


# ---------------------------------------------------------------- Pub/Sub


def _delivery(envelope: Any, fallback_id: str = "") -> PubsubDelivery:
    """A PubsubDelivery from a push envelope / MessagePublishedData object."""
    if not isinstance(envelope, dict):
        raise BadEvent("Pub/Sub payload must be a JSON object")
    message = envelope.get("message")
    if not isinstance(message, dict):
        raise BadEvent("Pub/Sub payload has no 'message' object")
    data = _strict_b64(message.get("data"))
    attributes = message.get("attributes")
    if attributes is not None and not (
        isinstance(attributes, dict) and all(isinstance(v, str) for v in attributes.values())
    ):
        raise BadEvent("message attributes must be an object of strings")
    try:
        parsed = MessagePublishedData.from_json(json.dumps(envelope), ignore_unknown_fields=True)
    except (json_format.Error, TypeError, ValueError) as exc:
        raise BadEvent(_short(f"not a Pub/Sub message: {exc}")) from None
    msg = parsed.message
    message_id = msg.message_id or fallback_id
    if not message_id:
        raise BadEvent("Pub/Sub message has no messageId")
    publish_time = msg.publish_time.rfc3339() if "publish_time" in msg else None
    return PubsubDelivery(
        data=data,
        attributes=dict(msg.attributes),
        message_id=message_id,
        publish_time=publish_time,
        delivery_attempt=parsed.delivery_attempt or None,
        subscription=parsed.subscription or None,
    )


def _strict_b64(value: Any) -> bytes:
    """google-events decodes base64 leniently ('!!!' -> b''), so check it here."""
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        raise BadEvent("message data must be a base64 string")
    padded = value + "=" * (-len(value) % 4)
    try:
        if "-" in value or "_" in value:
            return base64.urlsafe_b64decode(padded.encode("ascii"))
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise BadEvent("message data is not valid base64") from None


def _job_id_in_data(data: bytes) -> str | None:
    if not data.strip():
        return None
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise BadEvent("message data is not JSON") from None
    if not isinstance(value, dict):
        raise BadEvent('message data must be a JSON object like {"job_id": ...}')
    job_id = value.get("job_id")
    if job_id is not None and not isinstance(job_id, str):
        raise BadEvent("job_id in message data must be a string")
    return job_id


# ---------------------------------------------------------------- Storage


def _object_from_notification(delivery: PubsubDelivery) -> UploadedObject:
    """A GCS Pub/Sub notification (JSON_API_V1 or NONE payload) -> UploadedObject."""
    attrs = delivery.attributes
    event_type = attrs.get("eventType")
    if event_type is None:
        raise BadEvent("not a Cloud Storage notification: no eventType attribute")
    if event_type != _GCS_FINALIZE:
        raise IgnoredEvent(f"storage notification {event_type!r} is not a finalized upload")
    resource: dict[str, Any] = {}
    payload_format = attrs.get("payloadFormat", "JSON_API_V1")
    if payload_format == "JSON_API_V1" and delivery.data:
        resource = _json_object(delivery.data, what="notification data")
    elif payload_format not in ("JSON_API_V1", "NONE"):
        raise BadEvent(f"unknown notification payloadFormat {payload_format!r}")
    for attr, key in (
        ("bucketId", "bucket"),
        ("objectId", "name"),
        ("objectGeneration", "generation"),
    ):
        if attr not in attrs:
            continue
        seen = resource.get(key)
        if seen is not None and str(seen) != attrs[attr]:
            raise BadEvent(f"attribute {attr}={attrs[attr]!r} disagrees with data {key}={seen!r}")
        resource[key] = attrs[attr]
    return _object_from_resource(resource, what="notification")


def _object_from_resource(resource: Any, *, what: str) -> UploadedObject:
    """An object resource (JSON API / StorageObjectData JSON) -> UploadedObject."""
    if not isinstance(resource, dict):
        raise BadEvent(f"{what} must be a JSON object")
    picked = {k: resource[k] for k in _OBJECT_FIELDS if resource.get(k) is not None}
    try:
        obj = StorageObjectData.from_json(json.dumps(picked), ignore_unknown_fields=True)
    except (json_format.Error, TypeError, ValueError) as exc:
        raise BadEvent(_short(f"{what} is not a storage object: {exc}")) from None
    if not obj.bucket or not obj.name:
        raise BadEvent(f"{what} names no bucket and object")
    if obj.generation <= 0:
        raise BadEvent(f"{what} has no positive generation")
    if "size" in picked and obj.size < 0:
        raise BadEvent(f"{what} has a negative size")
    return UploadedObject(
        bucket=obj.bucket,
        name=obj.name,
        generation=int(obj.generation),
        content_type=obj.content_type or None,
        size=int(obj.size) if "size" in picked else None,
        metadata=dict(obj.metadata),
    )


def _short(text: str) -> str:
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."
