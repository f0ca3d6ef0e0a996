output "submit_url" {
  description = "POST /jobs and GET /jobs/<id> here, with an identity token."
  value       = google_cloudfunctions2_function.fn["submit"].service_config[0].uri
}

output "dashboard" {
  description = "Open the dashboard: run this (you must be in dashboard_viewers), then browse http://localhost:8080."
  value       = "gcloud run services proxy ${google_cloudfunctions2_function.fn["dashboard"].name} --region ${var.region} --project ${var.project_id} --port 8080"
}

output "monitoring_dashboard" {
  description = "The Cloud Monitoring dashboard of the queue's metrics."
  value       = "https://console.cloud.google.com/monitoring/dashboards/builder/${element(split("/", google_monitoring_dashboard.reclaim.id), 3)}?project=${var.project_id}"
}

output "function_urls" {
  description = "Cloud Run URL of every function (each pool's claim and the admin function included)."
  value = merge(
    { for k, f in google_cloudfunctions2_function.fn : k => f.service_config[0].uri },
    { admin = google_cloudfunctions2_function.admin.service_config[0].uri },
  )
}

output "run_jobs" {
  description = "The Cloud Run job of each job pool (docs/long-stages.md), by pool, and the image they run (built by the task-image function from claim's archive); empty without job pools."
  value = {
    jobs  = { for pool, job in google_cloud_run_v2_job.pool : pool => job.id }
    image = try(data.google_cloud_run_v2_service.task_image[0].template[0].containers[0].image, null)
  }
}

output "records_bucket" {
  description = "The queue: jobs/, pending/, batches/, outputs/."
  value       = google_storage_bucket.records.name
}

output "record_shard_buckets" {
  description = "Record buckets beside records_bucket (record_shards - 1 of them; empty with one)."
  value       = google_storage_bucket.record_shards[*].name
}

output "uploads_bucket" {
  description = "Drop a file here and it becomes a job."
  value       = google_storage_bucket.uploads.name
}

output "topics" {
  description = "Topic ids: jobs (doorbells), uploads (GCS notifications), dead_letter."
  value       = { for k, t in google_pubsub_topic.topics : k => t.name }
}

output "dead_letter_subscription" {
  description = "Pull subscription that holds what was dead-lettered."
  value       = google_pubsub_subscription.dead_letter_hold.name
}

output "service_accounts" {
  description = "Runtime SA of each function (the admin function's included; pool claims and the Cloud Run jobs run as claim's), and the invoker and build SAs."
  value = merge(
    { for k, sa in google_service_account.fn : k => sa.email },
    {
      admin   = google_service_account.admin.email
      invoker = google_service_account.invoker.email
      builder = google_service_account.builder.email
    },
  )
}

output "example_curl" {
  description = "Submit a demo job as yourself (you must be in submit_invokers)."
  value       = <<-EOT
    curl -sS -X POST "${google_cloudfunctions2_function.fn["submit"].service_config[0].uri}/jobs" \
      -H "Authorization: Bearer $(gcloud auth print-identity-token)" \
      -H "Content-Type: application/json" \
      -d '{"pipeline": "demo", "payload": {}}'
  EOT
}

output "cli_env" {
  description = "What the reclaim CLI needs to operate this deployment with your ADC (export each, then `reclaim list`)."
  value = {
    RECLAIM_PROJECT        = var.project_id
    RECLAIM_RECORDS_BUCKET = google_storage_bucket.records.name
    RECLAIM_SHARD_BUCKETS  = join(",", google_storage_bucket.record_shards[*].name)
    RECLAIM_LEGACY_NAMES   = tostring(var.legacy_record_names)
    RECLAIM_JOBS_TOPIC     = google_pubsub_topic.topics["jobs"].name
  }
}

output "version" {
  description = "The reclaim version of the library the archives carry (its reclaim/VERSION); the plan fails when reclaim_version pins another."
  value       = local.reclaim_version
  precondition {
    condition     = var.reclaim_version == "" || var.reclaim_version == local.reclaim_version
    error_message = "reclaim_version pins ${var.reclaim_version}, but the library in ${local.repo_root} is ${local.reclaim_version}: install the reclaim you pin and run `reclaim tf-module` (make deploy does), or pin the new version."
  }
}
