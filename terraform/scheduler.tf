# The sweep tick: requeues jobs whose owner went silent, fails those out of attempts.
resource "google_cloud_scheduler_job" "sweep" {
  name             = "${var.name_prefix}-sweep"
  project          = var.project_id
  region           = var.region
  description      = "POST to reclaim sweep: requeue or fail stale pending jobs."
  schedule         = var.sweep_schedule
  time_zone        = var.sweep_time_zone
  attempt_deadline = "${local.functions.sweep.timeout_seconds}s"

  retry_config {
    retry_count = 0 # the next tick is the retry
  }

  http_target {
    uri         = google_cloudfunctions2_function.fn["sweep"].service_config[0].uri
    http_method = "POST"
    headers     = { "Content-Type" = "application/json" }
    body        = base64encode("{}")

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = google_cloudfunctions2_function.fn["sweep"].service_config[0].uri
    }
  }

  lifecycle {
    precondition {
      condition     = var.queue.sweep_max_seconds < local.functions.sweep.timeout_seconds
      error_message = "queue.sweep_max_seconds must be below sweep_function.timeout_seconds, or the platform cuts a sweep short."
    }
  }

  # The invoker's run.invoker on sweep is granted after the function exists, so it
  # cannot be waited for before this job; a tick refused meanwhile is retried by the
  # next tick (retry_count = 0), and nothing is lost (the sweep is idempotent).
  depends_on = [time_sleep.apis_propagate, google_cloud_run_v2_service_iam_member.invoker]
}
