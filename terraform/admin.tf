# The admin function: the operator routes of the HTTP API (a job's cancel and retry, bulk
# cancel and retry, a pipeline's pause and resume; docs/api.md, "Operator routes"). The
# same shared code as submit (shared/http/routes.py), deployed as its own function so that
# Cloud Run's IAM check admits only var.operators before any code runs
# (cloud.google.com/run/docs/authenticating/service-to-service); submit answers these
# routes 404, naming this function. Its resources live here, beside local.functions, with
# its own service account and the two grants its code uses.

resource "google_service_account" "admin" {
  account_id   = "${var.name_prefix}-admin"
  project      = var.project_id
  display_name = "reclaim admin function (runtime): the operator routes"

  depends_on = [time_sleep.apis_propagate]
}

# Cancel, retry, bulk and pause read and CAS-write records, markers and the pause flag:
# object CRUD on the records bucket only (no uploads, no bucket or IAM admin).
resource "google_storage_bucket_iam_member" "admin_records" {
  bucket = google_storage_bucket.records.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.admin.email}"
}

resource "google_storage_bucket_iam_member" "admin_record_shards" {
  count = length(local.shard_buckets)

  bucket = google_storage_bucket.record_shards[count.index].name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.admin.email}"
}

# A retry rings its job, a resume its parked jobs: publish on the jobs topics only (the
# default pool's and each pool's: a job's doorbell goes to its pool, pools.tf).
resource "google_pubsub_topic_iam_member" "admin_rings_jobs" {
  for_each = toset(concat(["jobs"], keys(local.pool_topics)))

  project = var.project_id
  topic   = google_pubsub_topic.topics[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.admin.email}"
}

# Who may call the operator routes: var.operators alone (validated: never public).
resource "google_cloud_run_v2_service_iam_member" "operators" {
  for_each = toset(var.operators)

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.admin.name
  role     = "roles/run.invoker"
  member   = each.value
}

resource "google_cloudfunctions2_function" "admin" {
  # checkov:skip=CKV_GCP_124:Operators call the admin function from their own machines, as users call submit; IAM admits only var.operators (run.invoker).
  name        = "${var.name_prefix}-admin"
  project     = var.project_id
  location    = var.region
  description = "reclaim admin (target admin): the operator routes"
  labels      = var.labels

  build_config {
    runtime           = "python311"
    entry_point       = "admin"
    service_account   = google_service_account.builder.id
    docker_repository = google_artifact_registry_repository.functions.id

    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.source["admin"].name
      }
    }
  }

  service_config {
    available_cpu                    = var.admin_function.cpu
    available_memory                 = var.admin_function.memory
    timeout_seconds                  = var.admin_function.timeout_seconds
    max_instance_request_concurrency = var.admin_function.concurrency
    min_instance_count               = var.admin_function.min_instances
    max_instance_count               = var.admin_function.max_instances
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.admin.email
    # THREADS: functions-framework's gunicorn threads; one per concurrent request.
    environment_variables = merge(local.reclaim_env, { THREADS = tostring(var.admin_function.concurrency) })
  }

  lifecycle {
    precondition {
      condition     = var.admin_function.concurrency >= 1 && var.admin_function.concurrency <= 1000
      error_message = "admin: concurrency must be 1..1000."
    }
    precondition {
      condition     = var.admin_function.min_instances >= 0 && var.admin_function.max_instances >= max(1, var.admin_function.min_instances)
      error_message = "admin: need 0 <= min_instances <= max_instances and max_instances >= 1."
    }
    precondition {
      condition     = var.admin_function.concurrency == 1 || tonumber(var.admin_function.cpu) >= 1
      error_message = "admin: max_instance_request_concurrency > 1 needs available_cpu >= 1."
    }
  }

  # The build uses the builder's fresh grants, the code its own two above: grants_propagate
  # (iam.tf) waits for all of them.
  depends_on = [time_sleep.grants_propagate]
}

output "admin_url" {
  description = "The operator routes (cancel, retry, bulk, pause, resume), for var.operators, with an identity token: reclaim_client.Client(submit_url, admin_url=...)."
  value       = google_cloudfunctions2_function.admin.service_config[0].uri
}
