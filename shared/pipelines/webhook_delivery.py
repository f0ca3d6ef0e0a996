"""One signed HTTPS POST to a vetted address: the webhook pipeline's I/O.

Server-side request forgery is the risk of a queue that POSTs where a submitter says, on
a platform whose metadata server answers at 169.254.169.254. So the host is resolved at
DELIVERY time, every address it resolves to is vetted (no private, loopback, link-local,
unspecified, multicast or reserved address: ``ipaddress``'s flags), and the connection is
made to the vetted address itself, with the URL's host as the TLS SNI name, the name the
certificate must match and the Host header: a DNS answer that changes between the check
and the connect (DNS rebinding) cannot move the request elsewhere.

The signature: ``Reclaim-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">``
with a secret read from an environment variable named ``RECLAIM_WEBHOOK_SECRET_*`` (on
Cloud Run functions a Secret Manager secret is exposed as such a variable: the secret's
name goes in the deployment, never in a record).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Any

from shared import tracing
from shared.errors import ReclaimError

SIGNATURE_HEADER = "Reclaim-Signature"
SECRET_ENV = re.compile(r"RECLAIM_WEBHOOK_SECRET_[A-Z0-9_]{1,64}")
ALLOW_LOOPBACK_ENV = "RECLAIM_WEBHOOK_ALLOW_LOOPBACK"
"""Local cloud only ("1"): lets a webhook reach a receiver on this machine. Never set it
in a deployment; nothing else (private ranges, metadata) is ever allowed."""
RETRYABLE_4XX = (408, 429)


class Refused(ReclaimError, ValueError):
    """The URL may not be called (scheme, host, or an address it resolves to)."""


class DeliveryFailed(ReclaimError):
    """The receiver answered with an error worth retrying (5xx, 408, 429) or was unreachable."""


class Rejected(ReclaimError):
    """The receiver refused the request for good (a 4xx other than 408 and 429)."""


@dataclass(frozen=True)
class Target:
    """A parsed https URL: host (as written), port, path with query."""

    host: str
    port: int
    path: str


def parse_target(url: object) -> Target:
    """An https URL with a host; Refused otherwise (also a literal address not allowed)."""
    if not isinstance(url, str) or len(url) > 2048:
        raise Refused("url must be a string of at most 2048 characters")
    from urllib3.util import parse_url  # on first use: no function's cold start pays it

    try:
        parsed = parse_url(url)
    except ValueError as exc:
        raise Refused(f"url is not a URL: {exc}") from None
    if parsed.scheme != "https":
        raise Refused(f"url must be https, not {parsed.scheme or 'schemeless'}")
    if not parsed.host or parsed.auth:
        raise Refused("url must name a host and carry no credentials")
    host = parsed.host.strip("[]")
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None  # a name: vetted when it is resolved, at delivery
    if literal is not None:
        vet_address(literal)
    return Target(host, parsed.port or 443, parsed.request_uri or "/")


def vet_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """Refused unless the address is a public one (loopback only with the local setting)."""
    mapped = getattr(address, "ipv4_mapped", None)
    addr = mapped if mapped is not None else address
    if addr.is_loopback and os.environ.get(ALLOW_LOOPBACK_ENV) == "1":
        return
    bad = (
        addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_unspecified
        or addr.is_multicast
        or addr.is_reserved
        or not addr.is_global
    )
    if bad:
        raise Refused(f"address {addr} is not a public address")


def resolve(target: Target) -> str:
    """The address to connect to: every address the host resolves to must pass vetting
    (one bad answer refuses the host), then the first (IPv4 first) is used. The system
    resolver reads numeric forms too ("2852039166" is 169.254.169.254): vetted the same."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise DeliveryFailed(f"cannot resolve {target.host}: {exc}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise DeliveryFailed(f"{target.host} resolves to no address")
    for address in addresses:
        vet_address(address)
    addresses.sort(key=lambda a: a.version)  # IPv4 first: not every egress routes IPv6
    return str(addresses[0])


def secret_from_env(name: object) -> bytes:
    """The signing secret from a RECLAIM_WEBHOOK_SECRET_* variable; Refused if unset."""
    if not isinstance(name, str) or not SECRET_ENV.fullmatch(name):
        raise Refused("secret_env must name a RECLAIM_WEBHOOK_SECRET_<NAME> variable")
    value = os.environ.get(name)
    if not value:
        raise Refused(f"{name} is not set in this deployment")
    return value.encode("utf-8")


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    """The header value: t=<unix>,v1=<hex HMAC-SHA256 over "t.body">."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: bytes, body: bytes, header: str, *, tolerance_s: float = 300.0) -> bool:
    """What a receiver does (docs/workflows.md): recompute, compare in constant time."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, body, timestamp), header)


def post(
    url: str,
    body: bytes,
    *,
    secret: bytes | None,
    headers: dict[str, str],
    timeout_s: float,
    traceparent: str | None = None,
) -> int:
    """POST to the vetted address; the status on 2xx, else DeliveryFailed or Rejected.

    `traceparent` (the stage's, shared.tracing) goes as the W3C header, so the receiver's
    own spans join the job's trace (https://www.w3.org/TR/trace-context/#traceparent-header)."""
    target = parse_target(url)
    address = resolve(target)
    sent = {"Content-Type": "application/json", "User-Agent": "reclaim-webhook", **headers}
    if traceparent is not None and tracing.parse(traceparent) is not None:
        sent[tracing.TRACEPARENT_HEADER] = traceparent
    sent["Host"] = target.host if target.port == 443 else f"{target.host}:{target.port}"
    if secret is not None:
        sent[SIGNATURE_HEADER] = sign(secret, body, int(time.time()))
    import urllib3

    pool = urllib3.HTTPSConnectionPool(
        address,
        target.port,
        timeout=urllib3.Timeout(connect=min(timeout_s, 10.0), read=timeout_s),
        retries=False,  # the queue retries, with its backoff and attempt budget
        cert_reqs="CERT_REQUIRED",
        server_hostname=target.host,  # SNI
        assert_hostname=target.host,  # the certificate must name the URL's host
    )
    try:
        response = pool.urlopen(
            "POST", target.path, body=body, headers=sent, redirect=False, preload_content=True
        )
    except urllib3.exceptions.HTTPError as exc:
        raise DeliveryFailed(f"POST {target.host} failed: {type(exc).__name__}: {exc}") from None
    finally:
        pool.close()
    status = int(response.status)
    if 200 <= status < 300:
        return status
    snippet = response.data[:200].decode("utf-8", "replace")
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        raise Rejected(f"the receiver answered {status}: {snippet}")
    raise DeliveryFailed(f"the receiver answered {status}: {snippet}")


def body_of(payload_body: Any, envelope: dict[str, Any]) -> bytes:
    """The JSON sent: the payload's body and reclaim's envelope (job, parents, batch)."""
    data = {"body": payload_body, "reclaim": envelope}
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")
