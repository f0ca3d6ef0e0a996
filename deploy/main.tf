# This repository's own deployment: a root module that calls the reclaim module in
# ../terraform, as a project made by `reclaim init` calls its copy (docs/library.md). The
# root owns the providers (versions.tf) and the state; the module owns everything else.
# Settings you would tune are arguments here (the module's variables.tf describes each);
# what differs per environment is a variable (terraform.tfvars).

module "reclaim" {
  source = "../terraform"

  project_id            = var.project_id
  region                = var.region
  submit_invokers       = var.submit_invokers
  dashboard_viewers     = var.dashboard_viewers
  operators             = var.operators
  notification_channels = var.notification_channels
  webhook_secrets       = var.webhook_secrets

  # this repository's example pipelines (csv-summary), its schedules.json and uploads.json
  pipelines_dir    = "../pipelines"
  pipeline_modules = var.pipeline_modules

  # claim: concurrency = jobs per instance (also RECLAIM_MAX_CONCURRENT and THREADS)
  claim_function = {
    concurrency     = 4
    cpu             = "1"
    memory          = "1Gi"
    timeout_seconds = 1800
    max_instances   = 10
  }
  claim_push = {
    ack_deadline_seconds  = 600
    max_delivery_attempts = 20
  }
  queue = {
    stale_seconds = 120
    max_attempts  = 3
  }
  retention_days = {
    done      = 30
    failed    = 90
    cancelled = 30
  }
  sweep_schedule = "* * * * *"
  alerts = {
    oldest_due_job_seconds   = 600
    failure_ratio            = 0.2
    sweep_silent_minutes     = 30 # at least 20: above the log-based metrics' lag
    claim_errors_per_5min    = 5
    platform_errors_per_5min = 5
  }
}
