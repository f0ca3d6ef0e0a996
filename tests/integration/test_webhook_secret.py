"""A signed webhook with its secret delivered as on GCP: terraform's webhook_secrets maps
NAME => a Secret Manager secret, and Cloud Run gives claim alone an environment variable
RECLAIM_WEBHOOK_SECRET_<NAME> holding the secret version's bytes, resolved when the
instance starts (cloud.google.com/functions/docs/configuring/secrets). Here submit runs
without the variable and claim with it, both over HTTP on the emulators; the variable's
name comes from terraform's own template, the receiver verifies the signature."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from reclaim.local.procs import stop
from shared.pipelines import webhook_delivery as wd
from tests.integration.function_support import make_queue, start_function
from tests.integration.test_workflows_http import Receiver
from tests.terraform.tfhcl import resources, unquote

# the bytes of the secret version, as `printf %s ... | gcloud secrets create --data-file=-`
SECRET = b"whsec-" + uuid.uuid4().hex.encode()


def _variable_for(name: str) -> str:
    """The variable terraform gives claim for webhook_secrets = {<name> = ...}."""
    fn = resources("google_cloudfunctions2_function")["fn"]
    dynamic = {unquote(k): v for d in fn["service_config"][0]["dynamic"] for k, v in d.items()}
    key = unquote(dynamic["secret_environment_variables"]["content"][0]["key"])
    return str(key.replace("${secret_environment_variables.key}", name))


VARIABLE = _variable_for("ORDERS")


@dataclass
class Env:
    submit: str
    claim: str


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    r = Receiver(tmp_path_factory.mktemp("webhook-secret"))
    yield r
    r.close()


@pytest.fixture(scope="module")
def cloud(
    emulator_env: dict[str, str],
    gcs_client: Any,
    publisher: Any,
    subscriber: Any,
    log_dir: Path,
    receiver: Receiver,
) -> Iterator[Env]:
    queue = make_queue("secret", emulator_env, gcs_client, publisher, subscriber, {})
    claim_only = {
        VARIABLE: SECRET.decode(),  # what Cloud Run sets from the secret version
        "RECLAIM_WEBHOOK_ALLOW_LOOPBACK": "1",  # the test receiver is on 127.0.0.1
        "SSL_CERT_FILE": str(receiver.ca_file),
    }
    assert VARIABLE not in queue.env
    submit, submit_url = start_function("submit", "submit", queue.env, log_dir)
    claim, claim_url = start_function("claim", "claim", {**queue.env, **claim_only}, log_dir)
    try:
        yield Env(submit_url, claim_url)
    finally:
        for proc in (submit, claim):
            stop(proc)


def _run(env: Env, payload: dict[str, Any]) -> dict[str, Any]:
    """Submit one webhook job, push its doorbell to claim, and read its record."""
    job_id = f"hook-{uuid.uuid4().hex[:8]}"
    body = {"id": job_id, "pipeline": "webhook", "payload": payload}
    resp = requests.post(f"{env.submit}/jobs", json=body, timeout=30)
    assert resp.status_code == 202, resp.text
    data = base64.b64encode(json.dumps({"job_id": job_id}).encode()).decode()
    push = {"message": {"data": data, "messageId": uuid.uuid4().hex[:12]}}
    requests.post(env.claim, json=push, timeout=60)
    view = requests.get(f"{env.submit}/jobs/{job_id}", timeout=30)
    assert view.status_code == 200, view.text
    return dict(view.json())


def test_claim_signs_with_the_secret_it_was_given_as_on_gcp(cloud: Env, receiver: Receiver) -> None:
    assert VARIABLE == "RECLAIM_WEBHOOK_SECRET_ORDERS" and wd.SECRET_ENV.fullmatch(VARIABLE)
    path = f"/signed-{uuid.uuid4().hex[:6]}"
    view = _run(cloud, {"url": receiver.url(path), "body": {"n": 1}, "secret_env": VARIABLE})
    assert view["status"] == "done", view
    ((_at, _path, headers, raw),) = receiver.hits(path)
    assert wd.verify(SECRET, raw, headers["Reclaim-Signature"])
    assert not wd.verify(SECRET + b"\n", raw, headers["Reclaim-Signature"])


def test_a_secret_the_deployment_does_not_have_fails_the_job_at_once(
    cloud: Env, receiver: Receiver
) -> None:
    path = f"/unsigned-{uuid.uuid4().hex[:6]}"
    payload = {"url": receiver.url(path), "secret_env": "RECLAIM_WEBHOOK_SECRET_NOT_DEPLOYED"}
    view = _run(cloud, payload)
    assert view["status"] == "failed" and view["attempts"] == 1, view
    assert "not set in this deployment" in json.dumps(view["error"])
    assert receiver.hits(path) == []  # nothing unsigned went out
