"""Cross-site request forgery defences of the dashboard's buttons (pure).

Three checks, each refusing with its reason
(https://cheatsheetseries.owasp.org/cheatsheets/Cross-Site_Request_Forgery_Prevention_Cheat_Sheet.html):
- a **signed double-submit token**: ``<nonce>.<HMAC(key, who, nonce)>`` in an HttpOnly,
  SameSite=Strict cookie, and the same value in each form; a POST must carry both,
  equal, and the HMAC must be the server's for the caller's verified identity
  (shared.http.identity). A planted cookie does not help an attacker: without the key no
  value of theirs verifies, and a value the dashboard issued to them is bound to their
  identity, not the victim's;
- ``Sec-Fetch-Site`` (set by the browser, not by page script), when present, must say
  the form came from this origin;
- ``Origin`` (else the ``Referer``'s origin), when present, must be the dashboard's own
  host and port (the request's ``Host``). One exception: behind ``gcloud run services
  proxy`` the browser is on http://localhost:PORT while the service sees its run.app
  host, so a loopback origin is accepted when the dashboard itself is NOT served on a
  loopback host (on the local cloud, where it is, another port is another origin and is
  refused). There the token's binding to the verified identity is what stops a page on
  another local port.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from urllib.parse import urlsplit

from shared.http.identity import Headers

COOKIE = "reclaim_csrf"
FIELD = "csrf"
KEY_BYTES = 32
_SAME = ("same-origin", "none")


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def new_token(key: bytes, who: str) -> str:
    """A token only this dashboard can make, for the caller `who` (their verified author)."""
    nonce = secrets.token_urlsafe(18)
    return f"{nonce}.{_mac(key, who, nonce)}"


def issued_to(token: str, key: bytes, who: str) -> bool:
    """True when the dashboard made `token` for `who`."""
    nonce, _, mac = token.partition(".")
    return bool(nonce and mac) and hmac.compare_digest(mac, _mac(key, who, nonce))


def problem(
    headers: Headers,
    cookies: Mapping[str, str],
    form: Mapping[str, str],
    *,
    key: bytes,
    who: str,
    host: str,
) -> str | None:
    """Why a POST must be refused, or None when it passes every check."""
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site not in _SAME:
        return f"the request came from another site (Sec-Fetch-Site: {site})"
    origin = headers.get("Origin") or _origin_of(headers.get("Referer"))
    if origin is not None and not _origin_allowed(origin, host):
        return f"the request came from another origin ({origin[:80]})"
    cookie, sent = cookies.get(COOKIE, ""), form.get(FIELD, "")
    if not cookie or not sent:
        return "the form's token is missing; reload the page and try again"
    if not hmac.compare_digest(cookie.encode(), sent.encode()):
        return "the form's token does not match its cookie; reload the page and try again"
    if not issued_to(sent, key, who):
        return "the form's token was not issued by this dashboard to you; reload the page"
    return None


def _mac(key: bytes, who: str, nonce: str) -> str:
    return hmac.new(key, f"{who}\n{nonce}".encode(), hashlib.sha256).hexdigest()


def _origin_of(referer: str | None) -> str | None:
    if not referer:
        return None
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "null"


def _origin_allowed(origin: str, host: str) -> bool:
    """The origin's host and port must be the request's Host (the scheme is not compared:
    TLS ends at Google's front end, so the service itself is reached over http)."""
    parts, own = urlsplit(origin), urlsplit("//" + host)
    if not parts.hostname:
        return False  # "null" (a sandboxed frame, a file) never posts here
    if parts.netloc.lower() == host.lower():
        return True
    return _loopback(parts.hostname) and not _loopback(own.hostname or "")


def _loopback(hostname: str) -> bool:
    if hostname.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
