# What reclaim looks like in Cloud Monitoring: log-based metrics from the functions'
# structured log lines, a dashboard and the alert policies (docs/seeing.md says why
# log-based metrics and not an exporter).
#
# local.log_metrics mirrors shared/metrics.py LOG_METRICS (tests/terraform compares
# the two): each one counts the lines whose jsonPayload.metric is its event, or
# distributes one numeric field of them, labelled from fields of the same line
# (https://cloud.google.com/logging/docs/logs-based-metrics/distribution-metrics).

locals {
  log_metrics = {
    queue_queued         = { event = "queue", value = "queued", labels = ["pipeline"], unit = "1", description = "Jobs queued (due or backing off)." }
    queue_running        = { event = "queue", value = "running", labels = ["pipeline"], unit = "1", description = "Jobs running." }
    queue_parked         = { event = "queue", value = "parked", labels = ["pipeline"], unit = "1", description = "Jobs waiting: parked by a stage, or for parents." }
    queue_oldest_due_age = { event = "queue", value = "oldest_due_age_s", labels = ["pipeline"], unit = "s", description = "Seconds the oldest due queued job has waited for an owner." }
    jobs_finished        = { event = "finished", value = null, labels = ["pipeline", "outcome"], unit = "1", description = "Attempts ended, by outcome (done, failed, requeued, cancelled)." }
    jobs_rescued         = { event = "rescued", value = null, labels = ["pipeline"], unit = "1", description = "Jobs whose silent owner's claim was taken back." }
    job_wait             = { event = "claimed", value = "wait_s", labels = ["pipeline"], unit = "s", description = "Seconds from submit (or not_before) to the first claim." }
    job_run              = { event = "finished", value = "run_s", labels = ["pipeline", "outcome"], unit = "s", description = "Seconds an attempt ran, claim to its end." }
    sweep_runs           = { event = "sweep", value = null, labels = [], unit = "1", description = "Sweep runs that finished." }
    request_errors       = { event = "request_error", value = null, labels = ["function", "status"], unit = "1", description = "Answers >= 500, by function and status." }
  }

  # Only this deployment's logs: every function is a Cloud Run service named
  # "<name_prefix>-<function>", and every job pool's Cloud Run job "<name_prefix>-<pool>-task",
  # whose tasks write the finished lines of the attempts they run. Container logs come from
  # "services, jobs, and worker pools" (cloud.google.com/run/docs/logging); a job's entries
  # carry the cloud_run_job monitored resource, labelled job_name (live check: the
  # audit's D-7, docs/long-stages.md).
  log_source = "((resource.type=\"cloud_run_revision\" AND resource.labels.service_name=~\"^${var.name_prefix}-\") OR (resource.type=\"cloud_run_job\" AND resource.labels.job_name=~\"^${var.name_prefix}-\"))"

  # The time series of a user-defined log-based metric: logging.googleapis.com/user/<name>.
  # Its points live on the monitored resource of the entry they came from, a revision's or
  # a job's: the metric type alone selects them all (no resource.type, which would leave
  # the jobs' out).
  metric_type = { for k, _ in local.log_metrics : k => "logging.googleapis.com/user/${var.name_prefix}/${k}" }
  metric      = { for k, _ in local.log_metrics : k => "metric.type=\"${local.metric_type[k]}\"" }

  # Cloud Run's request count of this deployment's services (Google's metric: no wait).
  run_requests = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND resource.labels.service_name=starts_with(\"${var.name_prefix}-\")"
  # The services that never answer 503 on purpose. A claim function answers 503 to ask
  # Pub/Sub for a redelivery (functions/claim/main.py: a job its revision lacks the code
  # of during a deploy, a hand-back whose ring failed), so its 503s are no platform
  # failure; the claims' own 5xx are the "claim errors" alert's.
  never_503 = [for key in concat(keys(local.functions), ["admin"]) : "\"${var.name_prefix}-${replace(key, "_", "-")}\"" if key != "claim"]

  dead_letter_series = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=\"${local.subscriptions.dead_letter_hold}\""
}

resource "google_logging_metric" "reclaim" {
  for_each = local.log_metrics

  project         = var.project_id
  name            = "${var.name_prefix}/${each.key}"
  description     = each.value.description
  filter          = "${local.log_source} AND jsonPayload.metric=\"${each.value.event}\""
  value_extractor = each.value.value == null ? null : "EXTRACT(jsonPayload.${each.value.value})"
  label_extractors = {
    for label in each.value.labels : label => "EXTRACT(jsonPayload.${label})"
  }

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = each.value.value == null ? "INT64" : "DISTRIBUTION"
    unit        = each.value.unit

    dynamic "labels" {
      for_each = each.value.labels
      content {
        key        = labels.value
        value_type = "STRING"
      }
    }
  }

  # Seconds and counts from 0.1 to about 2 days in 24 buckets growing x1.8.
  dynamic "bucket_options" {
    for_each = each.value.value == null ? [] : [1]
    content {
      exponential_buckets {
        num_finite_buckets = 24
        growth_factor      = 1.8
        scale              = 0.1
      }
    }
  }

  depends_on = [time_sleep.apis_propagate]
}

# A log-based metric is not usable in an alert policy at once: the Monitoring API answers
# 404 "Cannot find metric(s) ... If a metric was created recently, it could take up to 10
# minutes to become available", and the provider retries alert-policy creation on 409
# only (github.com/hashicorp/terraform-provider-google/issues/11102,
# github.com/GoogleCloudPlatform/cloud-foundation-fabric/pull/3739). The policies on
# these metrics wait var.log_metrics_ready_seconds (default the 10 minutes the API names)
# after them; the wait starts when the metrics exist, so it overlaps the function builds.
# A new metric replaces the wait (triggers), so its policy waits too.
resource "time_sleep" "log_metrics_ready" {
  create_duration = "${var.log_metrics_ready_seconds}s"
  triggers = {
    metrics = join(",", sort([for m in google_logging_metric.reclaim : m.id]))
  }
}

# --- alerts: each says what to do ---------------------------------------------------

resource "google_monitoring_alert_policy" "oldest_due_job" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: a due job waits too long"
  combiner              = "OR"
  notification_channels = var.notification_channels
  severity              = "WARNING"

  conditions {
    display_name = "oldest due job older than ${var.alerts.oldest_due_job_seconds} s"
    condition_threshold {
      # one queue line per pipeline per sweep: its mean over 2 minutes is the last value
      filter          = local.metric["queue_oldest_due_age"]
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.oldest_due_job_seconds
      duration        = "300s"
      aggregations {
        alignment_period     = "120s"
        per_series_aligner   = "ALIGN_MEAN"
        cross_series_reducer = "REDUCE_MAX"
        group_by_fields      = ["metric.label.pipeline"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "reclaim: jobs of $${metric.label.pipeline} wait for an owner"
    content   = <<-EOT
      A due job of pipeline $${metric.label.pipeline} has waited more than ${var.alerts.oldest_due_job_seconds} s for an owner.
      Work is piling up: claim cannot keep up, or its doorbells do not arrive.

      1. Open the dashboard (`gcloud run services proxy ${var.name_prefix}-dashboard --region ${var.region}`) and follow the oldest due job.
      2. Is claim at its max_instances (Cloud Run: instance count of ${var.name_prefix}-claim)? Raise claim_function.max_instances or concurrency.
      3. Is claim refusing (alert "claim errors", 5xx in its request log)? Fix that first.
      4. Doorbells dead-lettered? `reclaim dlq --requeue` re-rings pending jobs.
    EOT
  }

  # the metrics it watches must exist and be known to Monitoring (log_metrics_ready)
  depends_on = [time_sleep.log_metrics_ready]
}

resource "google_monitoring_alert_policy" "failure_rate" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: jobs fail"
  combiner              = "OR"
  notification_channels = var.notification_channels
  severity              = "ERROR"

  conditions {
    display_name = "failed / (done + failed) above ${var.alerts.failure_ratio} over 10 min"
    condition_threshold {
      filter             = "${local.metric["jobs_finished"]} AND metric.label.outcome=\"failed\""
      denominator_filter = "${local.metric["jobs_finished"]} AND metric.label.outcome=one_of(\"done\", \"failed\")"
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alerts.failure_ratio
      duration           = "0s"
      aggregations {
        alignment_period     = "600s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.pipeline"]
      }
      denominator_aggregations {
        alignment_period     = "600s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["metric.label.pipeline"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "reclaim: jobs of $${metric.label.pipeline} fail"
    content   = <<-EOT
      More than ${var.alerts.failure_ratio * 100}% of the jobs of $${metric.label.pipeline} that ended in the last 10 minutes failed.

      1. `reclaim list --status failed` (or the dashboard) shows them and their errors.
      2. A bug or bad input in the pipeline: fix it and deploy, then `reclaim retry <id>` (or the Retry button) per job.
      3. "attempts exhausted" errors mean owners went silent: look for instance crashes (out of memory, timeouts) in ${var.name_prefix}-claim's logs.
    EOT
  }

  # the metrics it watches must exist and be known to Monitoring (log_metrics_ready)
  depends_on = [time_sleep.log_metrics_ready]
}

resource "google_monitoring_alert_policy" "dead_letters" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: doorbells dead-lettered"
  combiner              = "OR"
  notification_channels = var.notification_channels
  severity              = "WARNING"

  conditions {
    display_name = "messages held by ${local.subscriptions.dead_letter_hold}"
    condition_threshold {
      # Pub/Sub's own metric: no log line needed (cloud.google.com/pubsub/docs/monitoring)
      filter          = local.dead_letter_series
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"
      aggregations {
        alignment_period   = "300s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "reclaim: doorbells were dead-lettered"
    content   = <<-EOT
      Pub/Sub gave up delivering some doorbells (or upload notifications) and moved them to ${local.subscriptions.dead_letter_hold}.
      No job is lost (the record is the queue and the sweep re-rings pending jobs), but something refused them many times.

      1. Look: the dashboard's Dead letters page, or `reclaim dlq`.
      2. Why were they refused? ${var.name_prefix}-claim / ${var.name_prefix}-submit-upload request logs (400: malformed, 5xx: an outage, 403: the invoker grant).
      3. Then `reclaim dlq --requeue`: re-rings the pending jobs and drops the rest.
    EOT
  }

  # the subscription it watches must exist first (it is named in a string)
  depends_on = [time_sleep.apis_propagate, google_pubsub_subscription.dead_letter_hold]
}

resource "google_monitoring_alert_policy" "sweep_silent" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: the sweep is not running"
  combiner              = "OR"
  notification_channels = var.notification_channels
  severity              = "ERROR"

  conditions {
    display_name = "no sweep run for ${var.alerts.sweep_silent_minutes} min"
    # One series across revisions: each revision writes its own series (the metric is on
    # cloud_run_revision), so without the reducer a deploy silences the old revision's
    # series and its incident never closes. The window outlasts the log-based metric's
    # lag (variables.tf, alerts.sweep_silent_minutes).
    condition_absent {
      filter   = local.metric["sweep_runs"]
      duration = "${var.alerts.sweep_silent_minutes * 60}s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "reclaim: the sweep has not run"
    content   = <<-EOT
      No sweep run has finished for ${var.alerts.sweep_silent_minutes} minutes (the schedule is "${var.sweep_schedule}").
      Without it, jobs whose owner vanished and lost doorbells wait until a status read or a drain finds them.

      1. Cloud Scheduler: is ${var.name_prefix}-sweep enabled, and what do its last attempts say (`gcloud scheduler jobs describe ${var.name_prefix}-sweep --location ${var.region}`)?
      2. 403: the invoker's run.invoker on ${var.name_prefix}-sweep. 5xx or timeouts: ${var.name_prefix}-sweep's logs (storage outage, misconfigured).
      3. Meanwhile `curl -X POST -H "Authorization: Bearer $(gcloud auth print-identity-token)" <sweep url>` runs one by hand.
    EOT
  }

  # the metrics it watches must exist and be known to Monitoring (log_metrics_ready)
  depends_on = [time_sleep.log_metrics_ready]
}

resource "google_monitoring_alert_policy" "claim_errors" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: claim errors"
  combiner              = "OR"
  notification_channels = var.notification_channels
  severity              = "ERROR"

  conditions {
    display_name = "claim answered 5xx more than ${var.alerts.claim_errors_per_5min} times in 5 min"
    condition_threshold {
      filter          = "${local.metric["request_errors"]} AND metric.label.function=\"claim\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.claim_errors_per_5min
      duration        = "0s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "reclaim: claim is failing deliveries"
    content   = <<-EOT
      ${var.name_prefix}-claim answered 5xx to more than ${var.alerts.claim_errors_per_5min} doorbells in 5 minutes; Pub/Sub redelivers them with backoff and dead-letters them after ${var.claim_push.max_delivery_attempts} attempts.

      1. 503 "unavailable": Cloud Storage or Pub/Sub errors; check the Google Cloud status page, nothing else to do.
      2. 500 "misconfigured": a bad RECLAIM_* setting or pipeline module; the log line names it. Fix and redeploy.
      3. 500 "internal error": a bug; the stack trace is in Error Reporting.
    EOT
  }

  # the metrics it watches must exist and be known to Monitoring (log_metrics_ready)
  depends_on = [time_sleep.log_metrics_ready]
}

# What the application never sees: Cloud Run's own answers (429 when claim is at
# max_instances, 504 at the request timeout, 503/500 when an instance runs out of memory
# or crashes) are counted by run.googleapis.com/request_count with response_code_class and
# response_code labels (cloud.google.com/monitoring/api/metrics_gcp_p_z#gcp-run), never
# by the app's request_error lines.
resource "google_monitoring_alert_policy" "platform_errors" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: Cloud Run refuses or fails requests"
  combiner              = "OR"
  notification_channels = var.notification_channels
  severity              = "ERROR"

  conditions {
    display_name = "5xx answers (any cause but 503) above ${var.alerts.platform_errors_per_5min} in 5 min"
    condition_threshold {
      filter          = "${local.run_requests} AND metric.labels.response_code_class=\"5xx\" AND metric.labels.response_code!=\"503\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.platform_errors_per_5min
      duration        = "0s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }
  conditions {
    display_name = "503 answers of the functions that never ask for a redelivery above ${var.alerts.platform_errors_per_5min} in 5 min"
    condition_threshold {
      filter          = "${local.run_requests} AND metric.labels.response_code=\"503\" AND resource.labels.service_name=one_of(${join(", ", local.never_503)})"
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.platform_errors_per_5min
      duration        = "0s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }
  conditions {
    display_name = "429 (no instance free) above ${var.alerts.platform_errors_per_5min} in 5 min"
    condition_threshold {
      filter          = "${local.run_requests} AND metric.labels.response_code=\"429\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.platform_errors_per_5min
      duration        = "0s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    subject   = "reclaim: $${resource.label.service_name} answers 5xx or 429"
    content   = <<-EOT
      Cloud Run answered $${resource.label.service_name}'s requests with 5xx or 429 more than ${var.alerts.platform_errors_per_5min} times in 5 minutes. These count the platform's own answers too, which no reclaim log line reports.

      1. Compare with the "claim errors" alert: 5xx here and not there come from the platform, not the app.
      2. 429: every instance is busy (max_instances x concurrency). Raise *_function.max_instances or concurrency; pushes are retried meanwhile.
      3. 504: requests hit timeout_seconds. For claim, the drain's budget or a stage runs too long; see its logs.
      4. 503/500 with "Memory limit exceeded" or a crash in the service's logs: raise *_function.memory or fix the crash.
      5. Claim functions' 503s are not counted: claim answers 503 on purpose to have Pub/Sub redeliver (a job its revision lacks the code of during a deploy); their failures are the "claim errors" alert's.
    EOT
  }

  depends_on = [time_sleep.apis_propagate]
}

# --- the dashboard ------------------------------------------------------------------

locals {
  _tile = { width = 24, height = 16 }
  dashboard_charts = [
    { title = "Jobs done per minute", filter = "${local.metric["jobs_finished"]} AND metric.label.outcome=\"done\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", group = ["metric.label.pipeline"] },
    { title = "Jobs failed per minute", filter = "${local.metric["jobs_finished"]} AND metric.label.outcome=\"failed\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", group = ["metric.label.pipeline"] },
    { title = "Queued", filter = local.metric["queue_queued"], aligner = "ALIGN_MEAN", reducer = "REDUCE_SUM", group = ["metric.label.pipeline"] },
    { title = "Running", filter = local.metric["queue_running"], aligner = "ALIGN_MEAN", reducer = "REDUCE_SUM", group = ["metric.label.pipeline"] },
    { title = "Parked (waiting)", filter = local.metric["queue_parked"], aligner = "ALIGN_MEAN", reducer = "REDUCE_SUM", group = ["metric.label.pipeline"] },
    { title = "Oldest due job waits (s)", filter = local.metric["queue_oldest_due_age"], aligner = "ALIGN_MEAN", reducer = "REDUCE_MAX", group = ["metric.label.pipeline"] },
    { title = "Wait, submit to start (s, p95)", filter = local.metric["job_wait"], aligner = "ALIGN_PERCENTILE_95", reducer = "REDUCE_MAX", group = ["metric.label.pipeline"] },
    { title = "Run time (s, p95)", filter = local.metric["job_run"], aligner = "ALIGN_PERCENTILE_95", reducer = "REDUCE_MAX", group = ["metric.label.pipeline"] },
    { title = "Rescued per minute", filter = local.metric["jobs_rescued"], aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", group = ["metric.label.pipeline"] },
    { title = "Dead letters held", filter = local.dead_letter_series, aligner = "ALIGN_MAX", reducer = "REDUCE_SUM", group = [] },
    { title = "5xx answers per minute", filter = local.metric["request_errors"], aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", group = ["metric.label.function"] },
    { title = "Sweep runs per minute", filter = local.metric["sweep_runs"], aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", group = [] },
  ]
}

resource "google_monitoring_dashboard" "reclaim" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "${var.name_prefix} queue"
    mosaicLayout = {
      columns = 48
      tiles = [
        # The API drops zero and empty fields (xPos/yPos 0, groupByFields []), so they are
        # left out here, or every plan shows a diff (terraform-provider-google #16173).
        for i, chart in local.dashboard_charts : merge({
          for k, v in { xPos = (i % 2) * local._tile.width, yPos = floor(i / 2) * local._tile.height } : k => v if v != 0
          }, {
          width  = local._tile.width
          height = local._tile.height
          widget = {
            title = chart.title
            xyChart = {
              dataSets = [{
                plotType = "LINE"
                timeSeriesQuery = {
                  timeSeriesFilter = {
                    filter = chart.filter
                    # ALIGN_DELTA over 60 s: a count per minute (ALIGN_RATE is per second)
                    aggregation = merge({
                      alignmentPeriod    = "60s"
                      perSeriesAligner   = chart.aligner
                      crossSeriesReducer = chart.reducer
                    }, { for k, v in { groupByFields = chart.group } : k => v if length(v) > 0 })
                  }
                }
              }]
            }
          }
        })
      ]
    }
  })

  depends_on = [google_logging_metric.reclaim]
}
