"""Who made a request, from what the platform verified: the one place that decides it.

Every author the queue records (an HTTP pause, a dashboard retry, cancel or pause) comes
from here, never from a header the caller chose (``X-Reclaim-By``, or an unverified
``X-Goog-Authenticated-User-Email``, which anyone can send when IAP is not in front:
https://cloud.google.com/iap/docs/signed-headers-howto).

Two sources, tried in this order:

1. **IAP's signed assertion** (``X-Goog-IAP-JWT-Assertion``), only when the service is
   configured with its expected audience (``RECLAIM_IAP_AUDIENCE``): verified with
   google-auth against IAP's public keys, its audience and its issuer
   (https://cloud.google.com/iap/docs/signed-headers-howto).
2. **The ID token Cloud Run's IAM check accepted.** Every reclaim service is private
   (run.invoker only), so a request that reaches the code carried a Google-signed ID
   token. Cloud Run checks ``X-Serverless-Authorization`` when present, else
   ``Authorization``, and passes the token on with its signature removed (replaced by
   ``SIGNATURE_REMOVED_BY_GOOGLE``): the claims are what IAM verified, the signature is
   gone (https://cloud.google.com/run/docs/authenticating/service-to-service,
   https://cloud.google.com/run/docs/troubleshooting#signature-removed). When both
   headers are sent, only ``X-Serverless-Authorization`` was checked, so the other one is
   never read. A token whose signature is still there is verified here against Google's
   keys before its email is believed.

The local cloud's Cloud Run front (reclaim/local/cloudrun/iam.py) does the same: it verifies
the token against its own issuer, refuses a bad one with 401, and strips the signature,
so this module reads the local cloud and GCP alike. Without a verified token the author
is the bare entry point ("http", "dashboard"): anonymous, never what the caller claimed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from google.auth.exceptions import GoogleAuthError

from shared.logs import get_logger

log = get_logger(__name__)

SERVERLESS_HEADER = "X-Serverless-Authorization"
AUTHORIZATION_HEADER = "Authorization"
IAP_HEADER = "X-Goog-IAP-JWT-Assertion"
SIGNATURE_REMOVED = "SIGNATURE_REMOVED_BY_GOOGLE"
IAP_CERTS_URL = "https://www.gstatic.com/iap/verify/public_key"
IAP_ISSUER = "https://cloud.google.com/iap"
GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
"""Google's ID-token keys (PEM), as google.oauth2.id_token.verify_oauth2_token uses."""
_EMAIL = re.compile(r"[^\s@<>\"'\\]{1,200}@[A-Za-z0-9.-]{1,100}")


class Headers(Protocol):
    """A request's headers: a dict, or Werkzeug's (case-insensitive) Headers."""

    def get(self, key: str, /) -> str | None: ...


Verify = Callable[[str, str | None, str], Mapping[str, Any]]
"""(token, audience or None, certs URL) -> verified claims; raises ValueError."""


def _google_verify(token: str, audience: str | None, certs_url: str) -> Mapping[str, Any]:
    """google-auth's verification: signature against the keys at certs_url, expiry, aud."""
    from google.auth.transport import requests as transport
    from google.oauth2 import id_token

    claims: Mapping[str, Any] = id_token.verify_token(
        token, transport.Request(), audience=audience, certs_url=certs_url
    )
    return claims


def verified_email(
    headers: Headers,
    *,
    iap_audience: str = "",
    verify: Verify = _google_verify,
) -> str | None:
    """The caller's email as the platform verified it, or None (anonymous)."""
    if any(len(_all(headers, name)) > 1 for name in (IAP_HEADER, *_TOKEN_HEADERS)):
        log.warning("an identity header was sent twice; author left anonymous")
        return None  # which one the platform checked would be a guess
    if iap_audience:
        return _iap_email(headers.get(IAP_HEADER) or "", iap_audience, verify)
    checked = headers.get(SERVERLESS_HEADER) or headers.get(AUTHORIZATION_HEADER) or ""
    scheme, _, token = checked.strip().partition(" ")
    if scheme.lower() != "bearer" or token.count(".") != 2:
        return None
    if token.rsplit(".", 1)[1] == SIGNATURE_REMOVED:
        return _email(_unverified_claims(token))  # Cloud Run's IAM checked it
    try:  # a signature is still there: believe it only once it verifies (Cloud Run
        # checked the audience; the keys say who signed)
        return _email(verify(token, None, GOOGLE_CERTS_URL))
    except (ValueError, GoogleAuthError) as exc:  # a bad token, or Google's keys unreachable
        log.warning("an identity token did not verify; author left anonymous", reason=str(exc))
        return None


_TOKEN_HEADERS = (SERVERLESS_HEADER, AUTHORIZATION_HEADER)


def _all(headers: Headers, name: str) -> list[str]:
    """Every value sent for `name` (Werkzeug's Headers match names in any case)."""
    getlist = getattr(headers, "getlist", None)
    if callable(getlist):
        return [str(v) for v in getlist(name)]
    value = headers.get(name)
    return [] if value is None else [value]


def author(
    prefix: str, headers: Headers, *, iap_audience: str = "", verify: Verify | None = None
) -> str:
    """The history's `by`: "<prefix>:<verified email>", or the bare prefix when anonymous."""
    email = verified_email(headers, iap_audience=iap_audience, verify=verify or _google_verify)
    return f"{prefix}:{email}" if email else prefix


def _iap_email(assertion: str, audience: str, verify: Verify) -> str | None:
    if not assertion:
        return None
    try:
        claims = verify(assertion, audience, IAP_CERTS_URL)
    except (ValueError, GoogleAuthError) as exc:  # a bad assertion, or IAP's keys unreachable
        log.warning("IAP's assertion did not verify; author left anonymous", reason=str(exc))
        return None
    if claims.get("iss") != IAP_ISSUER:
        log.warning("IAP's assertion has another issuer", issuer=str(claims.get("iss"))[:80])
        return None
    return _email(claims)


def _unverified_claims(token: str) -> Mapping[str, Any]:
    from google.auth import jwt

    try:
        claims = jwt.decode(token, verify=False)
    except ValueError:
        return {}
    return claims if isinstance(claims, Mapping) else {}


def _email(claims: Mapping[str, Any]) -> str | None:
    email = claims.get("email")
    if isinstance(email, str) and _EMAIL.fullmatch(email):
        return email
    return None
