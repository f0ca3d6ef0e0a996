"""reclaim.local.faultproxy: classification (pure), then counting and faults over the wire
in front of a real fake-gcs-server, through the official storage client."""

from __future__ import annotations

import http.client
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
from google.api_core import exceptions as gexc

from reclaim.local import wiring
from reclaim.local.faultproxy import FaultProxy, request_kind


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/download/storage/v1/b/bk/o/jobs%2Fa.json?alt=media", "read"),
        ("GET", "/storage/v1/b/bk/o/jobs%2Fa.json?projection=noAcl", "read"),
        ("GET", "/storage/v1/b/bk/o?prefix=pending%2F&maxResults=15", "list"),
        ("POST", "/upload/storage/v1/b/bk/o?uploadType=multipart&ifGenerationMatch=0", "write"),
        ("PUT", "/upload/storage/v1/b/bk/o?uploadType=resumable&upload_id=x", "write"),
        ("PATCH", "/storage/v1/b/bk/o/a", "write"),
        ("POST", "/storage/v1/b/bk/o/a/rewriteTo/b/bk/o/b", "write"),
        ("DELETE", "/storage/v1/b/bk/o/pending%2Fa", "delete"),
        ("GET", "/storage/v1/b/bk?projection=noAcl", "other"),
        ("POST", "/storage/v1/b?project=p", "other"),
        ("GET", "/healthz", "other"),
    ],
)
def test_request_kind(method: str, path: str, kind: str) -> None:
    assert request_kind(method, path) == kind


def test_bad_settings_are_refused(gcs_server: str) -> None:
    with pytest.raises(ValueError, match="fault_fraction"):
        FaultProxy(gcs_server, fault_fraction=1.5)
    with pytest.raises(ValueError, match="must not exceed 1"):
        FaultProxy(gcs_server, fault_fraction=0.6, lost_answer_fraction=0.6)
    with pytest.raises(ValueError, match="statuses"):
        FaultProxy(gcs_server, statuses=(200,))
    with pytest.raises(ValueError, match="every"):
        FaultProxy(gcs_server, every=-1)
    with pytest.raises(ValueError, match="kinds"):
        FaultProxy(gcs_server, kinds=("reads",))


@pytest.fixture
def proxied(gcs_server: str) -> Iterator[Callable[..., FaultProxy]]:
    made: list[FaultProxy] = []

    def make(**kwargs: object) -> FaultProxy:
        proxy = FaultProxy(gcs_server, **kwargs).start()  # type: ignore[arg-type]
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.stop()


def test_counts_each_kind_on_the_wire(
    proxied: Callable[..., FaultProxy], gcs_server: str, unique: Callable[[str], str]
) -> None:
    proxy = proxied()
    client = wiring.storage_client(proxy.url, "p")
    bucket = client.create_bucket(unique("fp"))
    blob = bucket.blob("jobs/a.json")
    blob.upload_from_string(b"{}", if_generation_match=0)
    assert bucket.blob("jobs/a.json").download_as_bytes() == b"{}"
    assert [b.name for b in client.list_blobs(bucket, prefix="jobs/")] == ["jobs/a.json"]
    bucket.blob("jobs/a.json").delete()
    assert proxy.counts() == {"read": 1, "write": 1, "delete": 1, "list": 1, "other": 1}
    assert proxy.by_prefix() == {  # the upload's name is in its multipart body
        "delete jobs/": 1,
        "list jobs/": 1,
        "other -": 1,
        "read jobs/": 1,
        "write jobs/": 1,
    }
    assert proxy.by_prefix(statuses=True)["write jobs/ 200"] == 1
    assert proxy.faults() == {}
    proxy.reset()
    assert sum(proxy.counts().values()) == 0
    assert proxy.by_prefix() == {}


def test_injected_fault_changes_nothing_upstream(
    proxied: Callable[..., FaultProxy], gcs_server: str, unique: Callable[[str], str]
) -> None:
    direct = wiring.storage_client(gcs_server, "p")
    name = unique("fp")
    direct.create_bucket(name)
    proxy = proxied(fault_fraction=1.0, statuses=(503,))
    blob = wiring.storage_client(proxy.url, "p").bucket(name).blob("x")
    with pytest.raises(gexc.ServiceUnavailable):
        blob.upload_from_string(b"1", if_generation_match=0, retry=None)
    assert direct.bucket(name).get_blob("x") is None
    assert proxy.faults().get("write:503") == 1
    assert proxy.faults().keys() <= {"write:503", "other:503"}  # + the bucket lookup


def test_lost_answer_lands_upstream_then_the_retry_sees_412(
    proxied: Callable[..., FaultProxy], gcs_server: str, unique: Callable[[str], str]
) -> None:
    direct = wiring.storage_client(gcs_server, "p")
    name = unique("fp")
    direct.create_bucket(name)
    proxy = proxied(lost_answer_fraction=1.0)
    blob = wiring.storage_client(proxy.url, "p").bucket(name).blob("x")
    with pytest.raises(gexc.ServiceUnavailable):
        blob.upload_from_string(b"1", if_generation_match=0, retry=None)
    assert direct.bucket(name).blob("x").download_as_bytes() == b"1"
    proxy.set_faults(lost_answer_fraction=0.0)
    with pytest.raises(gexc.PreconditionFailed):
        blob.upload_from_string(b"1", if_generation_match=0, retry=None)


def _statuses(proxy: FaultProxy, n: int) -> list[int]:
    up = urlsplit(proxy.url)
    conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=10)
    out = []
    for _ in range(n):
        conn.request("GET", "/storage/v1/b/no-such-bucket/o/x")
        resp = conn.getresponse()
        resp.read()
        out.append(resp.status)
    conn.close()
    return out


def test_faults_follow_the_seed(proxied: Callable[..., FaultProxy]) -> None:
    first = _statuses(proxied(fault_fraction=0.5, seed=7), 40)
    again = _statuses(proxied(fault_fraction=0.5, seed=7), 40)
    other = _statuses(proxied(fault_fraction=0.5, seed=8), 40)
    assert first == again
    assert first != other
    assert {503, 429, 404} <= set(first)


def test_every_nth_request_of_the_given_kinds_faults(
    proxied: Callable[..., FaultProxy],
) -> None:
    """A count of faults that does not depend on the order requests arrive in: every
    third read answers 429, and requests of other kinds neither fault nor count."""
    proxy = proxied(every=3, kinds=("read",), statuses=(429,))
    assert _statuses(proxy, 9) == [404, 404, 429] * 3  # the bucket is absent: 404 upstream
    conn = http.client.HTTPConnection(urlsplit(proxy.url).netloc, timeout=10)
    for _ in range(5):  # lists: another kind
        conn.request("GET", "/storage/v1/b/no-such-bucket/o")
        conn.getresponse().read()
    conn.close()
    assert proxy.faults() == {"read:429": 3}
    assert _statuses(proxy, 3) == [404, 404, 429]
