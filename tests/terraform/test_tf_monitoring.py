"""terraform/monitoring.tf read with python-hcl2: the log-based metrics are the code's
table, every alert says what to do and notifies the channels of the variable, every
metric an alert or the dashboard names is defined, and the dashboard function is
reachable by its named viewers only."""

from __future__ import annotations

import re
from typing import Any

from shared import metrics
from tests.terraform.tfhcl import all_text, block, config, resources, unquote

REFERENCE = re.compile(r'local\.metric(?:_type)?\["(\w+)"\]')


def _locals() -> dict[str, Any]:
    return dict(config()["locals"])


def _alerts() -> dict[str, dict[str, Any]]:
    return dict(resources("google_monitoring_alert_policy"))


def _conditions(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in policy["conditions"]]


def test_the_log_metrics_are_the_codes_table() -> None:
    tf = _locals()["log_metrics"]
    assert set(tf) == {m.name for m in metrics.LOG_METRICS}
    for m in metrics.LOG_METRICS:
        got = tf[m.name]
        assert unquote(got["event"]) == m.event, m.name
        assert (None if got["value"] is None else unquote(got["value"])) == m.value, m.name
        assert [unquote(label) for label in got["labels"]] == list(m.labels), m.name
        assert unquote(got["unit"]) == m.unit and unquote(got["description"]) == m.description


def test_each_metric_filters_its_event_and_extracts_its_fields() -> None:
    metric = resources("google_logging_metric")["reclaim"]
    assert unquote(metric["for_each"]) == "local.log_metrics"
    assert unquote(metric["name"]) == "${var.name_prefix}/${each.key}"
    assert 'jsonPayload.metric=\\"${each.value.event}\\"' in unquote(metric["filter"])
    assert "EXTRACT(jsonPayload.${each.value.value})" in unquote(metric["value_extractor"])
    assert "EXTRACT(jsonPayload.${label})" in unquote(metric["label_extractors"])
    descriptor = block(metric, "metric_descriptor")
    assert unquote(descriptor["metric_kind"]) == "DELTA"
    assert '"DISTRIBUTION"' in unquote(descriptor["value_type"])
    # only this deployment's services are counted
    assert "service_name=~" in unquote(_locals()["log_source"])


def test_the_field_names_the_code_logs_are_what_the_metrics_extract() -> None:
    gauge = metrics.Gauge("p").fields()
    done = metrics.finished({"pipeline": "p"}, metrics.Ending.DONE, run_s=1.0)
    error = metrics.request_error("claim", 503)
    logged = {**gauge, **done, **error, "wait_s": 0.0}
    for m in metrics.LOG_METRICS:
        for name in (*m.labels, *([m.value] if m.value else [])):
            assert name in logged, f"{m.name}: no line carries {name}"


def test_every_alert_says_what_to_do_and_notifies_the_variables_channels() -> None:
    alerts = _alerts()
    assert len(alerts) >= 5
    for name, policy in alerts.items():
        assert unquote(policy["notification_channels"]) == "var.notification_channels", name
        doc = block(policy, "documentation")
        assert unquote(doc["mime_type"]) == "text/markdown", name
        content = unquote(doc["content"])
        assert len(content) > 200 and re.search(r"^\s*1\. ", content, re.M), (
            f"{name}: the documentation must list what to do, step by step"
        )
        assert unquote(doc.get("subject", "")), name


def test_the_five_alerts_the_issue_asks_for() -> None:
    text = {name: str(policy) for name, policy in _alerts().items()}
    cond = {name: _conditions(p)[0] for name, p in _alerts().items()}
    assert 'local.metric["queue_oldest_due_age"]' in text["oldest_due_job"]
    assert "condition_threshold" in cond["failure_rate"]
    threshold = cond["failure_rate"]["condition_threshold"][0]
    assert "denominator_filter" in threshold and "outcome=one_of" in threshold["denominator_filter"]
    assert "num_undelivered_messages" in unquote(_locals()["dead_letter_series"])
    assert "local.subscriptions.dead_letter_hold" in unquote(_locals()["dead_letter_series"])
    assert "local.dead_letter_series" in text["dead_letters"]
    assert "condition_absent" in cond["sweep_silent"]
    assert 'local.metric["sweep_runs"]' in text["sweep_silent"]
    claim = unquote(cond["claim_errors"]["condition_threshold"][0]["filter"])
    assert 'local.metric["request_errors"]' in claim and 'function=\\"claim\\"' in claim


def test_every_metric_an_alert_or_the_dashboard_names_is_defined() -> None:
    defined = set(_locals()["log_metrics"])
    named = set(REFERENCE.findall(all_text()))
    assert named and named <= defined, named - defined
    charted = set(REFERENCE.findall(str(_locals()["dashboard_charts"])))
    assert charted == defined, f"not on the dashboard: {defined - charted}"
    dashboard = resources("google_monitoring_dashboard")["reclaim"]
    assert "local.dashboard_charts" in unquote(dashboard["dashboard_json"])


def test_the_dashboard_reads_the_metrics_terraform_defines() -> None:
    env = _locals()["reclaim_env"]
    assert unquote(env["RECLAIM_METRICS_SOURCE"]) == "monitoring:${var.name_prefix}"
    metric_type = unquote(_locals()["metric_type"])
    assert '"logging.googleapis.com/user/${var.name_prefix}/${k}"' in metric_type
    from datetime import UTC, datetime

    from shared.dashboard import figures

    q = figures.query("PREFIX", metrics.LOG_METRICS[0], datetime.now(UTC), 60, 1, None, None)
    assert f"logging.googleapis.com/user/PREFIX/{metrics.LOG_METRICS[0].name}" in q["filter"]


def test_the_dashboard_is_for_named_viewers_only() -> None:
    viewers = resources("google_cloud_run_v2_service_iam_member")["dashboard_viewers"]
    assert unquote(viewers["for_each"]) == "toset(var.dashboard_viewers)"
    assert unquote(viewers["role"]) == "roles/run.invoker"
    assert unquote(viewers["name"]) == 'google_cloudfunctions2_function.fn["dashboard"].name'
    validation = config()["variable"]["dashboard_viewers"]["validation"][0]
    pattern = re.search(r'regex\("(.*?)", m\)', unquote(validation["condition"]))
    assert pattern is not None
    regex = pattern.group(1).replace("\\\\", "\\")
    assert re.search(regex, "group:ops@example.com")
    assert not any(re.search(regex, p) for p in ("allUsers", "allAuthenticatedUsers"))


# --- second pass: what a first apply and a deploy meet --------------------------------


def test_the_policies_on_log_metrics_wait_until_monitoring_knows_them() -> None:
    """404 "Cannot find metric(s)" for up to 10 min (provider issue #11102)."""
    sleep = resources("time_sleep")["log_metrics_ready"]
    assert unquote(sleep["create_duration"]) == "${var.log_metrics_ready_seconds}s"
    assert config()["variable"]["log_metrics_ready_seconds"]["default"] >= 600
    assert "google_logging_metric.reclaim" in unquote(sleep["triggers"]["metrics"])
    for name, policy in _alerts().items():
        if "local.metric[" in str(policy):
            deps = [unquote(d) for d in policy["depends_on"]]
            assert "time_sleep.log_metrics_ready" in deps, name


def test_the_sweep_absence_is_one_series_over_a_window_longer_than_the_lag() -> None:
    absent = _conditions(_alerts()["sweep_silent"])[0]["condition_absent"][0]
    aggregation = block(absent, "aggregations")
    assert unquote(aggregation["cross_series_reducer"]) == "REDUCE_SUM"
    assert "group_by_fields" not in aggregation  # one series for every revision
    minutes = config()["variable"]["alerts"]
    from tests.terraform.tfhcl import optional_defaults

    assert optional_defaults("alerts")["sweep_silent_minutes"] >= 20
    assert "sweep_silent_minutes >= 20" in unquote(minutes["validation"][1]["condition"])


def test_cloud_runs_own_failures_alert_by_response_code() -> None:
    policy = _alerts()["platform_errors"]
    run = unquote(_locals()["run_requests"])
    assert 'metric.type=\\"run.googleapis.com/request_count\\"' in run
    assert 'service_name=starts_with(\\"${var.name_prefix}-\\")' in run
    filters = [unquote(c["condition_threshold"][0]["filter"]) for c in _conditions(policy)]
    assert any('response_code_class=\\"5xx\\"' in f for f in filters)
    assert any('response_code=\\"429\\"' in f for f in filters)
    assert all("local.run_requests" in f for f in filters)


def test_the_dashboard_json_has_no_field_the_api_drops() -> None:
    """xPos/yPos 0 and groupByFields [] come back absent: a diff on every plan (#16173)."""
    text = unquote(resources("google_monitoring_dashboard")["reclaim"]["dashboard_json"])
    assert "k => v if v != 0" in text and "k => v if length(v) > 0" in text
    for chart in _locals()["dashboard_charts"]:
        if "per minute" in unquote(chart["title"]):
            assert unquote(chart["aligner"]) == "ALIGN_DELTA", chart["title"]  # per 60 s
    assert 'alignmentPeriod    = "60s"' in all_text()


def test_what_a_cloud_run_job_task_logs_reaches_the_metrics_alerts_and_dashboard() -> None:
    """F8: a job pool's attempts end in its tasks, whose log entries carry the cloud_run_job
    monitored resource (label job_name), not cloud_run_revision: the metrics read both, and
    no alert or chart narrows a metric back to revisions."""
    source = unquote(_locals()["log_source"])
    assert 'resource.type=\\"cloud_run_revision\\"' in source
    assert (
        'resource.type=\\"cloud_run_job\\" AND resource.labels.job_name=~\\"^${var.name_prefix}-\\"'
        in source
    )
    assert " OR " in source and source.startswith("((") and source.endswith("))")
    metric = unquote(_locals()["metric"])
    assert "cloud_run_revision" not in metric and "resource.type" not in metric
    # the job's name matches the prefix the source filters on (run_jobs.tf)
    assert "jobs/${var.name_prefix}-${replace(pool" in unquote(_locals()["run_jobs"])
    for name, policy in _alerts().items():
        for condition in _conditions(policy):
            for kind in ("condition_threshold", "condition_absent"):
                for c in condition.get(kind, []):
                    text = unquote(c["filter"])
                    if "local.metric[" in text:
                        assert "cloud_run_revision" not in text, name


def test_the_platform_alert_leaves_out_claims_deliberate_503s() -> None:
    """The second pass's gap: claim answers 503 on purpose (a redelivery during a deploy's
    skew); the platform alert counts 503 only of the functions that never do."""
    policy = _alerts()["platform_errors"]
    filters = [unquote(c["condition_threshold"][0]["filter"]) for c in _conditions(policy)]
    (five,) = [f for f in filters if 'response_code_class=\\"5xx\\"' in f]
    assert 'response_code!=\\"503\\"' in five
    (only_503,) = [f for f in filters if 'response_code=\\"503\\"' in f]
    assert 'one_of(${join(", ", local.never_503)})' in only_503
    never = unquote(_locals()["never_503"])
    assert 'if key != "claim"' in never and 'concat(keys(local.functions), ["admin"])' in never
