# The module's outputs, each passed on: `terraform -chdir=deploy output -raw submit_url`.

output "submit_url" {
  description = "POST /jobs and GET /jobs/<id> here, with an identity token."
  value       = module.reclaim.submit_url
}

output "dashboard" {
  description = "Open the dashboard: run this (you must be in dashboard_viewers), then browse http://localhost:8080."
  value       = module.reclaim.dashboard
}

output "monitoring_dashboard" {
  description = "The Cloud Monitoring dashboard of the queue's metrics."
  value       = module.reclaim.monitoring_dashboard
}

output "function_urls" {
  description = "Cloud Run URL of every function."
  value       = module.reclaim.function_urls
}

output "records_bucket" {
  description = "The queue: jobs/, pending/, batches/, outputs/."
  value       = module.reclaim.records_bucket
}

output "uploads_bucket" {
  description = "Drop a file here and it becomes a job."
  value       = module.reclaim.uploads_bucket
}

output "topics" {
  description = "Topic ids: jobs (doorbells), uploads (GCS notifications), dead_letter."
  value       = module.reclaim.topics
}

output "dead_letter_subscription" {
  description = "Pull subscription that holds what was dead-lettered."
  value       = module.reclaim.dead_letter_subscription
}

output "service_accounts" {
  description = "Runtime SA of each function, and the invoker and build SAs."
  value       = module.reclaim.service_accounts
}

output "example_curl" {
  description = "Submit a demo job as yourself (you must be in submit_invokers)."
  value       = module.reclaim.example_curl
}

output "cli_env" {
  description = "What the reclaim CLI needs to operate this deployment with your ADC (export each, then `reclaim list`)."
  value       = module.reclaim.cli_env
}

output "version" {
  description = "The reclaim version of the library the archives carry (its reclaim/VERSION); the plan fails when reclaim_version pins another."
  value       = module.reclaim.version
}

output "admin_url" {
  description = "The operator routes (cancel, retry, bulk, pause, resume), for operators, with an identity token."
  value       = module.reclaim.admin_url
}

output "run_jobs" {
  description = "The Cloud Run job of each job pool, and the image they run."
  value       = module.reclaim.run_jobs
}
