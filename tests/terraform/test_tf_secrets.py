"""The webhook signing secrets: from Secret Manager, to claim alone, as the
RECLAIM_WEBHOOK_SECRET_* variables the webhook pipeline reads
(shared/pipelines/webhook_delivery.py)."""

from __future__ import annotations

from shared.pipelines import webhook_delivery
from tests.terraform.hcl_eval import evaluate
from tests.terraform.tfhcl import config, resources, unquote


def test_secret_manager_is_enabled() -> None:
    assert '"secretmanager.googleapis.com"' in str(config()["locals"]["apis"])


def test_only_claim_gets_the_secrets_as_the_variables_the_code_reads() -> None:
    fn = resources("google_cloudfunctions2_function")["fn"]
    service = fn["service_config"][0]
    dynamic = {unquote(k): v for d in service["dynamic"] for k, v in d.items()}
    spec = dynamic["secret_environment_variables"]
    # claim and each pool's claim (they run as claim's account: local.identity)
    assert (
        unquote(spec["for_each"])
        == 'local.identity[each.key] == "claim" ? var.webhook_secrets : {}'
    )
    content = spec["content"][0]
    key = unquote(content["key"])
    assert key == "RECLAIM_WEBHOOK_SECRET_${secret_environment_variables.key}"
    named = key.replace("${secret_environment_variables.key}", "ORDERS_V2")
    assert webhook_delivery.SECRET_ENV.fullmatch(named)
    assert unquote(content["secret"]) == "secret_environment_variables.value"
    assert unquote(content["version"]) == "latest"


def test_the_accessor_is_granted_per_secret_to_claims_account_before_claim_deploys() -> None:
    grant = resources("google_secret_manager_secret_iam_member")["claim_reads_webhook_secrets"]
    assert unquote(grant["for_each"]) == "var.webhook_secrets"
    assert unquote(grant["secret_id"]) == "each.value"
    assert unquote(grant["role"]) == "roles/secretmanager.secretAccessor"
    assert unquote(grant["member"]) == 'serviceAccount:${google_service_account.fn["claim"].email}'
    waited = [unquote(d) for d in resources("time_sleep")["grants_propagate"]["depends_on"]]
    assert "google_secret_manager_secret_iam_member.claim_reads_webhook_secrets" in waited
    # no project-level accessor anywhere
    for name, member in resources("google_project_iam_member").items():
        assert "secretmanager" not in unquote(member["role"]), name


def test_the_names_are_checked_at_plan() -> None:
    validation = config()["variable"]["webhook_secrets"]["validation"][0]
    condition = unquote(validation["condition"])
    assert evaluate(condition, {"webhook_secrets": {"ORDERS": "orders-signing"}}) is True
    for bad in ({"orders": "x"}, {"ORDERS": "a/b"}, {"": "x"}):
        assert evaluate(condition, {"webhook_secrets": bad}) is False, bad
