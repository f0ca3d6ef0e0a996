"""The webhook's pure parts: which URLs and addresses are refused, and the signature.
(Delivery over TLS to a real receiver: tests/integration/test_workflows_http.py.)"""

from __future__ import annotations

import ipaddress
import socket
import time
from typing import Any

import pytest

from shared.pipelines import webhook
from shared.pipelines import webhook_delivery as wd


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",  # the metadata server
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "127.0.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "100.64.0.1",  # shared address space (carrier NAT): not global
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:169.254.169.254",
        "::",
    ],
)
def test_private_and_special_addresses_are_refused(address: str) -> None:
    with pytest.raises(wd.Refused):
        wd.vet_address(ipaddress.ip_address(address))


def test_public_addresses_pass() -> None:
    wd.vet_address(ipaddress.ip_address("8.8.8.8"))
    wd.vet_address(ipaddress.ip_address("2001:4860:4860::8888"))


def test_loopback_only_with_the_local_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wd.ALLOW_LOOPBACK_ENV, "1")
    wd.vet_address(ipaddress.ip_address("127.0.0.1"))
    with pytest.raises(wd.Refused):  # the setting never opens private ranges
        wd.vet_address(ipaddress.ip_address("10.0.0.1"))
    with pytest.raises(wd.Refused):
        wd.vet_address(ipaddress.ip_address("169.254.169.254"))


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/",
        "ftp://example.com/",
        "https:///nohost",
        "https://user:pw@example.com/",
        "https://169.254.169.254/",
        "https://[fd00::1]/",
        42,
    ],
)
def test_bad_urls_are_refused(url: Any) -> None:
    with pytest.raises(wd.Refused):
        wd.parse_target(url)


def test_a_target_keeps_host_port_and_path() -> None:
    assert wd.parse_target("https://example.com:8443/a/b?c=1") == wd.Target(
        "example.com", 8443, "/a/b?c=1"
    )


def fake_resolver(*answers: str) -> Any:
    def getaddrinfo(host: str, port: int, *args: Any, **kw: Any) -> list[Any]:
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in answers
        ]

    return getaddrinfo


def test_one_private_answer_refuses_the_host_at_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS that answers a public and a private address (or rebinds to one) is refused."""
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver("8.8.8.8", "169.254.169.254"))
    with pytest.raises(wd.Refused, match=r"169\.254\.169\.254"):
        wd.resolve(wd.Target("evil.example", 443, "/"))


def test_the_vetted_address_is_the_one_connected_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver("2001:4860::1", "8.8.4.4"))
    assert wd.resolve(wd.Target("good.example", 443, "/")) == "8.8.4.4"


def test_the_signature_verifies_only_with_the_secret_and_in_time() -> None:
    body = b'{"a":1}'
    now = int(time.time())
    header = wd.sign(b"k", body, now)
    assert header.startswith(f"t={now},v1=")
    assert wd.verify(b"k", body, header)
    assert not wd.verify(b"other", body, header)
    assert not wd.verify(b"k", body + b" ", header)
    assert not wd.verify(b"k", body, wd.sign(b"k", body, now - 3600))
    assert not wd.verify(b"k", body, "garbage")


def test_the_secret_comes_only_from_a_webhook_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECLAIM_WEBHOOK_SECRET_X", "v")
    assert wd.secret_from_env("RECLAIM_WEBHOOK_SECRET_X") == b"v"
    for name in ("HOME", "RECLAIM_WEBHOOK_SECRET_UNSET", "reclaim_webhook_secret_x"):
        with pytest.raises(wd.Refused):
            wd.secret_from_env(name)


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"url": "https://example.com", "secret": "inline"},
        {"url": "https://example.com", "secret_env": "HOME"},
        {"url": "https://example.com", "body": []},
        {"url": "https://example.com", "timeout_s": 0},
        {"url": "https://10.0.0.1/"},
    ],
)
def test_the_pipeline_refuses_bad_payloads_at_submit(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        webhook.PIPELINE.check_payload(payload)
