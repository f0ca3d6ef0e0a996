"""shared.http.identity: the author comes from what the platform verified (Cloud Run's IAM
check, IAP's signed assertion), never from a header the caller chose."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from google.auth import crypt, jwt

from shared.http import identity

IAP_AUDIENCE = "/projects/123/locations/europe-west1/services/reclaim-dashboard"
CALLER_CHOSEN = {
    "X-Reclaim-By": "boss",
    "X-Goog-Authenticated-User-Email": "accounts.google.com:boss@example.com",
    "X-Goog-Authenticated-User-Id": "accounts.google.com:1",
}


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def cloud_run_token(claims: dict[str, Any]) -> str:
    """A token as Cloud Run passes it on after its IAM check: the signature removed."""
    return f"{_b64({'alg': 'RS256', 'typ': 'JWT'})}.{_b64(claims)}.{identity.SIGNATURE_REMOVED}"


def _pem_public(key: Any) -> str:
    return str(
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def _pem_private(key: Any) -> bytes:
    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def test_the_token_cloud_run_checked_names_the_author() -> None:
    token = cloud_run_token({"email": "ops@example.com", "aud": "https://x.run.app"})
    assert identity.author("http", {"Authorization": f"Bearer {token}"}) == "http:ops@example.com"
    assert identity.author("http", {"X-Serverless-Authorization": f"Bearer {token}"}) == (
        "http:ops@example.com"
    )


def test_a_header_the_caller_chose_is_never_the_author() -> None:
    assert identity.author("http", CALLER_CHOSEN) == "http"
    assert identity.author("dashboard", {**CALLER_CHOSEN, "Authorization": "Basic eDp5"}) == (
        "dashboard"
    )


def test_with_both_headers_only_the_one_cloud_run_checked_counts() -> None:
    """Cloud Run checks X-Serverless-Authorization when present and passes Authorization
    through untouched: a forged token there must not win."""
    checked = cloud_run_token({"email": "ops@example.com"})
    forged = cloud_run_token({"email": "boss@example.com"})
    both = {"X-Serverless-Authorization": f"Bearer {checked}", "Authorization": f"Bearer {forged}"}
    assert identity.author("http", both) == "http:ops@example.com"
    unusable = {"X-Serverless-Authorization": "Bearer nope", "Authorization": f"Bearer {forged}"}
    assert identity.author("http", unusable) == "http"


def test_a_signed_token_is_believed_only_once_its_signature_verifies() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    certs = {"k1": _pem_public(key)}

    def verify(token: str, audience: str | None, url: str) -> Mapping[str, Any]:
        assert url == identity.GOOGLE_CERTS_URL and audience is None
        claims: Mapping[str, Any] = jwt.decode(token, certs=certs)
        return claims

    now = int(time.time())
    claims = {"email": "ops@example.com", "iat": now, "exp": now + 60}
    good = jwt.encode(crypt.RSASigner.from_string(_pem_private(key), "k1"), claims).decode()
    bad = jwt.encode(crypt.RSASigner.from_string(_pem_private(other), "k1"), claims).decode()
    assert identity.author("http", {"Authorization": f"Bearer {good}"}, verify=verify) == (
        "http:ops@example.com"
    )
    assert identity.author("http", {"Authorization": f"Bearer {bad}"}, verify=verify) == "http"


def test_an_email_claim_that_is_not_an_email_is_no_author() -> None:
    for email in ("", "no-at-sign", "a b@example.com", 7, "x@" + "y" * 300):
        token = cloud_run_token({"email": email})
        assert identity.author("http", {"Authorization": f"Bearer {token}"}) == "http"


@pytest.fixture
def iap_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[crypt.Signer]:
    """IAP's signer (ES256) and its public keys served over HTTP, where google-auth's
    verification fetches them (as from https://www.gstatic.com/iap/verify/public_key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    body = json.dumps({"iap-1": _pem_public(key)}).encode()

    class Keys(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Keys)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(identity, "IAP_CERTS_URL", f"http://127.0.0.1:{server.server_port}/")
    yield crypt.ES256Signer.from_string(_pem_private(key), "iap-1")
    server.shutdown()
    server.server_close()


def _assertion(signer: crypt.Signer, **claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": identity.IAP_ISSUER,
        "aud": IAP_AUDIENCE,
        "email": "ops@example.com",
        "sub": "accounts.google.com:1",
        "iat": now,
        "exp": now + 600,
        **claims,
    }
    return str(jwt.encode(signer, body).decode())


def test_iap_s_assertion_is_verified_against_its_keys_audience_and_issuer(
    iap_keys: crypt.Signer,
) -> None:
    def by(assertion: str, **extra: str) -> str:
        headers = {identity.IAP_HEADER: assertion, **extra}
        return identity.author("dashboard", headers, iap_audience=IAP_AUDIENCE)

    assert by(_assertion(iap_keys)) == "dashboard:ops@example.com"
    assert by(_assertion(iap_keys, aud="/projects/9/global/backendServices/1")) == "dashboard"
    assert by(_assertion(iap_keys, iss="https://evil.example")) == "dashboard"
    assert by(_assertion(iap_keys, exp=int(time.time()) - 3600)) == "dashboard"
    forged = ec.generate_private_key(ec.SECP256R1())
    assert by(_assertion(crypt.ES256Signer.from_string(_pem_private(forged), "iap-1"))) == (
        "dashboard"
    )
    # with IAP configured, neither its unsigned headers nor a Cloud Run token count
    token = cloud_run_token({"email": "boss@example.com"})
    assert by("", **CALLER_CHOSEN, Authorization=f"Bearer {token}") == "dashboard"


def test_keys_out_of_reach_leave_the_author_anonymous_never_a_500() -> None:
    from google.auth.exceptions import TransportError

    def unreachable(token: str, audience: str | None, url: str) -> Mapping[str, Any]:
        raise TransportError(f"cannot reach {url}")

    signed = cloud_run_token({"email": "ops@example.com"}).rsplit(".", 1)[0] + ".c2ln"
    headers = {"Authorization": f"Bearer {signed}", identity.IAP_HEADER: signed}
    assert identity.author("http", headers, verify=unreachable) == "http"
    assert identity.author("http", headers, iap_audience=IAP_AUDIENCE, verify=unreachable) == "http"
