# Cron schedules (docs/time.md): one Cloud Scheduler job per entry of the schedules file,
# the same file `make dev`'s ticker and the functions read (var.schedules_file, default
# schedules.json in the pipelines folder; shipped in the archives as the package's
# schedules.json, which RECLAIM_SCHEDULES_FILE names, main.tf).
# Each tick POSTs to submit's /schedules/<name>/tick; submit derives the job id from the
# tick's time (X-CloudScheduler-ScheduleTime when Cloud Scheduler sends it, else the
# newest tick at or before now), so a retried tick lands on the same job (create-only
# record). A bad entry fails the plan here, naming it (the preconditions below), and
# `make dev` refuses to start on it; submit still answers the good entries' ticks.
locals {
  schedules_file = (var.schedules_file == "" ? "${local.pipelines_dir}/schedules.json"
  : startswith(var.schedules_file, "/") ? var.schedules_file : abspath("${path.root}/${var.schedules_file}"))
  # What the archives carry as <package>/schedules.json and uploads.json (functions.tf),
  # whichever files the variables name: the functions read the same files terraform did.
  package_settings_files = {
    for name, path in { "schedules.json" = local.schedules_file, "uploads.json" = local.uploads_file } :
    name => path if fileexists(path)
  }
  schedules = fileexists(local.schedules_file) ? {
    for s in jsondecode(file(local.schedules_file)).schedules : s.name => s
  } : {}

  # Cloud Scheduler's cron dialect (cloud.google.com/scheduler/docs/configuring/cron-job-schedules:
  # numbers, JAN-DEC, SUN-SAT, *, a-b, a,b, */n, a-b/n; "does not support L", nor W, #,
  # ?, @macros): the same atoms and field template as shared/cron/dialect.py.
  cron_atoms = [
    "[0-5]?[0-9]",
    "[01]?[0-9]|2[0-3]",
    "0?[1-9]|[12][0-9]|3[01]",
    "0?[1-9]|1[0-2]|JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC",
    "[0-7]|SUN|MON|TUE|WED|THU|FRI|SAT",
  ]
  cron_field_template = "(?:\\*(?:/[1-9][0-9]*)?|(?:@A)(?:-(?:@A)(?:/[1-9][0-9]*)?)?)(?:,(?:\\*(?:/[1-9][0-9]*)?|(?:@A)(?:-(?:@A)(?:/[1-9][0-9]*)?)?))*"
  cron_pattern        = "^${join(" ", [for a in local.cron_atoms : replace(local.cron_field_template, "@A", a)])}$"
}

resource "google_cloud_scheduler_job" "cron" {
  for_each = local.schedules

  name             = "${var.name_prefix}-cron-${each.key}"
  project          = var.project_id
  region           = var.region
  description      = "reclaim schedule ${each.key}: one ${each.value.pipeline} job per tick."
  schedule         = each.value.cron
  # Cloud Scheduler stores tz database names; Etc/UTC is what the sweep job uses too
  time_zone        = lookup(each.value, "time_zone", "Etc/UTC")
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

  lifecycle {
    precondition {
      condition     = can(regex("^[a-z][a-z0-9-]{0,39}$", each.key))
      error_message = "schedules.json: schedule name ${jsonencode(each.key)} must be lowercase letters, digits and '-' (max 40), starting with a letter."
    }
    precondition {
      condition     = can(regex(local.cron_pattern, try(each.value.cron, "")))
      error_message = "schedules.json: schedule ${each.key}: cron ${jsonencode(try(each.value.cron, null))} is not Cloud Scheduler's cron: 5 fields of numbers, JAN-DEC / SUN-SAT, *, a-b, a,b, */n, a-b/n; no L, W, #, ? or @macros (cloud.google.com/scheduler/docs/configuring/cron-job-schedules)."
    }
    precondition {
      condition     = try(length(each.value.pipeline) > 0, false) && contains(["allow", "skip"], try(each.value.overlap, "allow"))
      error_message = "schedules.json: schedule ${each.key}: pipeline must name a pipeline, and overlap be allow or skip."
    }
    # A pipeline no function knows would make every tick a 400: known is built in, or
    # named (quoted) in a module of pipeline_modules, as uploads.tf checks its routes'.
    precondition {
      condition     = contains(local.builtin_pipelines, try(each.value.pipeline, "")) || strcontains(local.upload_module_text, "\"${try(each.value.pipeline, "")}\"")
      error_message = "schedules.json: schedule ${each.key}: pipeline ${jsonencode(try(each.value.pipeline, null))} is unknown (built in, or named in a module of pipeline_modules)."
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
