"""Cross-site request forgery defences of the dashboard's buttons (pure).

Three checks, each enough against a browser-driven forgery on its own
(https://cheatsheetseries.owasp.org/cheatsheets/Cross-Site_Request_Forgery_Prevention_Cheat_Sheet.html):
- a double-submit token: a random value in an HttpOnly, SameSite=Strict cookie
  that the page also puts in each form; a POST must carry both, equal. Another
  site can neither read the cookie nor make the browser send it;
- ``Sec-Fetch-Site`` (set by the browser, not by page script), when present,
  must say the form came from this origin;
- ``Origin``, when present, must be this host, or a loopback address: behind
  ``gcloud run services proxy`` the browser's origin is http://localhost:PORT
  while the service sees its own run.app host.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from urllib.parse import urlsplit

COOKIE = "reclaim_csrf"
FIELD = "csrf"
_SAME = ("same-origin", "none")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def problem(
    headers: Mapping[str, str], cookies: Mapping[str, str], form: Mapping[str, str]
) -> str | None:
    """Why a POST must be refused, or None when it passes every check."""
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site not in _SAME:
        return f"the request came from another site (Sec-Fetch-Site: {site})"
    origin = headers.get("Origin")
    if origin is not None and not _origin_allowed(origin, headers.get("Host", "")):
        return f"the request came from another origin ({origin})"
    cookie, sent = cookies.get(COOKIE, ""), form.get(FIELD, "")
    if not cookie or not sent:
        return "the form's token is missing; reload the page and try again"
    if not hmac.compare_digest(cookie.encode(), sent.encode()):
        return "the form's token does not match; reload the page and try again"
    return None


def _origin_allowed(origin: str, host: str) -> bool:
    parts = urlsplit(origin)
    if not parts.hostname:
        return False  # "null" (a sandboxed frame, a file) never posts here
    if parts.netloc.lower() == host.lower():
        return True
    return _loopback(parts.hostname)


def _loopback(hostname: str) -> bool:
    if hostname.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
