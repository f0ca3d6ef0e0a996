# Cron schedules (docs/time.md): one Cloud Scheduler job per entry of the schedules file,
# the same file `make dev`'s ticker reads (schedules.json in the pipelines folder). Each
# tick POSTs to submit's /schedules/<name>/tick; Cloud Scheduler adds the tick's time in
# the X-CloudScheduler-ScheduleTime header, from which submit derives the job id, so a
# retried tick lands on the same job (create-only record). The file is checked by
# submit on every tick (cron, time zone, pipeline, overlap); terraform only reads it.
locals {
  schedules_file = "${local.pipelines_dir}/schedules.json"
  schedules = fileexists(local.schedules_file) ? {
    for s in jsondecode(file(local.schedules_file)).schedules : s.name => s
  } : {}
}

resource "google_cloud_scheduler_job" "cron" {
  for_each = local.schedules

  name             = "${var.name_prefix}-cron-${each.key}"
  project          = var.project_id
  region           = var.region
  description      = "reclaim schedule ${each.key}: one ${each.value.pipeline} job per tick."
  schedule         = each.value.cron
  time_zone        = lookup(each.value, "time_zone", "UTC")
  attempt_deadline = "${max(15, min(local.functions.submit.timeout_seconds, 1800))}s"

  retry_config {
    retry_count          = 3 # a retry carries the same schedule time: the same job id
    min_backoff_duration = "10s"
  }

  http_target {
    uri         = "${google_cloudfunctions2_function.fn["submit"].service_config[0].uri}/schedules/${each.key}/tick"
    http_method = "POST"
    headers     = { "Content-Type" = "application/json" }
    body        = base64encode("{}")

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = google_cloudfunctions2_function.fn["submit"].service_config[0].uri
    }
  }

  depends_on = [time_sleep.apis_propagate, google_cloud_run_v2_service_iam_member.cron_invoker]
}

# The invoker SA may call submit, only when there is a schedule to deliver. Granted after
# submit exists; a tick refused before it propagates is retried (retry_config), and a
# later tick is a new job anyway.
resource "google_cloud_run_v2_service_iam_member" "cron_invoker" {
  count = length(local.schedules) > 0 ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn["submit"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.invoker.email}"
}
