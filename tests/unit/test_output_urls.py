"""The signed download URL of an output (shared.stores.gcs.GcsStore.output_url): a V4
signature made by the client library from the credentials the function has. With a key
(here a service account key made on the spot) it signs locally; on Cloud Run, whose
credentials have no key, the library asks the IAM Service Account Credentials API's
signBlob (a network call to Google: not made in a test; the terraform grant that allows
it is asserted in tests/terraform). An emulator's anonymous credentials sign nothing."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.oauth2 import service_account

from shared.stores.gcs import GcsStore

SA = "reclaim-submit@example-project.iam.gserviceaccount.com"


def _key_credentials() -> service_account.Credentials:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "example-project",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": SA,
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    return service_account.Credentials.from_service_account_info(json.loads(json.dumps(info)))


def test_a_signed_url_is_v4_for_the_one_object_and_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    client = storage.Client(project="example-project", credentials=_key_credentials())
    store = GcsStore("example-records", client)
    url = store.output_url("job-1", "outputs/job-1/2/report.csv", 900)
    assert url is not None
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert parts.netloc == "storage.googleapis.com"
    assert parts.path == "/example-records/outputs/job-1/2/report.csv"
    assert query["X-Goog-Algorithm"] == ["GOOG4-RSA-SHA256"]
    assert query["X-Goog-Expires"] == ["900"]
    assert query["X-Goog-Credential"][0].startswith(SA + "/")
    assert len(query["X-Goog-Signature"][0]) == 512  # hex of a 2048-bit RSA signature


def test_no_url_for_another_jobs_object_nor_on_an_emulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    client = storage.Client(project="example-project", credentials=_key_credentials())
    store = GcsStore("example-records", client)
    assert store.output_url("job-1", "outputs/job-2/1/theirs.csv", 900) is None
    assert store.output_url("job-1", "jobs/ab/job-1.json", 900) is None
    anonymous = storage.Client(project="example-project", credentials=AnonymousCredentials())
    assert (
        GcsStore("example-records", anonymous).output_url("job-1", "outputs/job-1/1/a", 9) is None
    )
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    assert store.output_url("job-1", "outputs/job-1/2/report.csv", 900) is None
