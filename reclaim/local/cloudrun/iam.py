"""The local Cloud Run's stand-in for its IAM check on ID tokens.

On GCP a request to a private service carries a Google-signed ID token (in
``X-Serverless-Authorization`` when present, else ``Authorization``); Cloud Run verifies
it, refuses a bad one, and passes it to the container with its signature replaced by
``SIGNATURE_REMOVED_BY_GOOGLE``
(https://cloud.google.com/run/docs/authenticating/service-to-service,
https://cloud.google.com/run/docs/troubleshooting#signature-removed).

Locally the issuer is the local cloud's own RSA key (there is no Google to sign), and a
request without a token is let through anonymous (the local cloud has no accounts). A
token that is there is checked as Cloud Run would (signature, expiry, audience = the
service's URL), refused with 401 when it does not verify, and passed on with its
signature removed, so shared.http.identity reads the local cloud and GCP the same way and a
client can never slip an unverified identity past the front.
"""

from __future__ import annotations

import time
import uuid

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import crypt, jwt

from shared.http.identity import AUTHORIZATION_HEADER, SERVERLESS_HEADER, SIGNATURE_REMOVED

ISSUER = "https://local-cloud.invalid"
TOKEN_LIFETIME_S = 3600
INVALID_TOKEN_TEXT = "401 Unauthorized: the request's ID token did not verify"


class Issuer:
    """The local cloud's signer of ID tokens, and the check the front makes of them."""

    def __init__(self) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._kid = uuid.uuid4().hex
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self._signer = crypt.RSASigner.from_string(pem, key_id=self._kid)
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self._certs = {self._kid: public.decode()}

    def mint(self, email: str, audience: str, lifetime_s: int = TOKEN_LIFETIME_S) -> str:
        """An ID token for `email`, for the service at `audience` (its URL), as
        `gcloud auth print-identity-token --audiences` would give one on GCP."""
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": audience,
            "sub": email,
            "email": email,
            "email_verified": True,
            "iat": now,
            "exp": now + lifetime_s,
        }
        token: bytes = jwt.encode(self._signer, claims)
        return token.decode()

    def admit(self, headers: dict[str, str], audiences: tuple[str, ...]) -> bool:
        """Check the token Cloud Run would check; strip its signature in place. False:
        answer 401. No token: admitted, anonymous. A token header sent twice (its name
        in two cases: HTTP header names are case-insensitive) is refused: which one was
        checked would be a guess, and the other would reach the function unstripped."""
        if _sent_twice(headers):
            return False
        name = _checked_header(headers)
        if name is None:
            return True
        scheme, _, token = headers[name].strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            claims = jwt.decode(token, certs=self._certs, audience=None)
        except (ValueError, TypeError):
            return False
        if claims.get("iss") != ISSUER or claims.get("aud") not in audiences:
            return False
        headers[name] = "Bearer " + token.rsplit(".", 1)[0] + "." + SIGNATURE_REMOVED
        return True


def _sent_twice(headers: dict[str, str]) -> bool:
    names = [key.lower() for key in headers]
    return any(names.count(h.lower()) > 1 for h in (SERVERLESS_HEADER, AUTHORIZATION_HEADER))


def _checked_header(headers: dict[str, str]) -> str | None:
    """The header Cloud Run checks: X-Serverless-Authorization wins over Authorization."""
    found = {key.lower(): key for key in headers}
    for wanted in (SERVERLESS_HEADER, AUTHORIZATION_HEADER):
        if wanted.lower() in found:
            return found[wanted.lower()]
    return None
