"""What tells a browser's cross-site request apart, for the routes that change things (pure).

The admin function's routes are an API for the client, the CLI and curl, never for a
page. Where a browser reaches the function with an operator's credentials (`gcloud run
services proxy` on localhost, IAP's cookie), a page on another site could make it send a
"simple" request (a form's body, text/plain, no body at all) that needs no CORS
preflight (https://fetch.spec.whatwg.org/#cors-safelisted-request-header,
https://cheatsheetseries.owasp.org/cheatsheets/Cross-Site_Request_Forgery_Prevention_Cheat_Sheet.html).
Two checks refuse it:

- the body's type must be ``application/json``, which a browser sends cross-site only
  after a preflight (OPTIONS) that the functions refuse with 405;
- ``Sec-Fetch-Site`` (set by the browser, never by a page's script), when present, must
  be ``same-origin`` or ``none`` (typed by the user); ``Origin``, when present (a browser
  sends it with every POST: https://fetch.spec.whatwg.org/#origin-header), must be the
  request's own host and port. A client that is not a browser sends neither.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from shared.http.identity import Headers

_SAME = ("same-origin", "none")
JSON_TYPE = "application/json"


def problem(headers: Headers, host: str, mimetype: str) -> tuple[int, str] | None:
    """(status, reason) of the refusal a request that changes things gets, or None."""
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() not in _SAME:
        return 403, f"the request came from another site (Sec-Fetch-Site: {site[:40]})"
    origin = headers.get("Origin")
    if origin is not None and not same_origin(origin, host):
        return 403, f"the request came from another origin ({origin[:80]})"
    if mimetype.lower() != JSON_TYPE:
        shown = (mimetype or "none")[:60]
        return 415, f"the body must be {JSON_TYPE} (send {{}} when there is no more), not {shown}"
    return None


def same_origin(origin: str, host: str) -> bool:
    """The origin's host and port are the request's Host (the scheme is not compared: TLS
    ends at Google's front end, so the service itself is reached over http)."""
    parts = urlsplit(origin.strip())
    return bool(parts.scheme and parts.hostname) and parts.netloc.lower() == host.lower()
