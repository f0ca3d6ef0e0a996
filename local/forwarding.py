"""What the local HTTP proxies (the claim balancer, the GCS fault proxy) share."""

from __future__ import annotations

from collections.abc import Iterable

# Headers that describe one connection, not the message: a proxy never passes them on.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "host",
    }
)


def end_to_end(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers a proxy forwards."""
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
