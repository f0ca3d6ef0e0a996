# The waitpoints function: POST /waitpoints/<token> completes a waitpoint (docs/waiting.md).
# A provider outside the project (a render farm's callback, a model API's webhook, a
# person's link) cannot mint a Google ID token, so this one function may be invoked by
# var.waitpoint_invokers (allUsers by default): the caller's proof is the token in the URL,
# an HMAC-SHA256 tag the code checks in constant time (shared/features/waits/rules.py),
# so only whoever was handed a token can complete that waitpoint. Callers inside the
# project may use the admin function's same route instead, behind IAM (admin.tf).
# Its service account touches what completing a waitpoint needs, nothing more: the
# records (read the job, compare-and-swap its release, the waits/ objects) and the jobs
# topics (ring the released job).

resource "google_service_account" "waitpoints" {
  account_id   = "${var.name_prefix}-waitpoints"
  project      = var.project_id
  display_name = "reclaim waitpoints function (runtime): waitpoint completions"

  depends_on = [time_sleep.apis_propagate]
}

# Read a record, compare-and-swap its release, read the key, keep an early completion:
# object CRUD on the records buckets only (no uploads, no bucket or IAM admin).
resource "google_storage_bucket_iam_member" "waitpoints_records" {
  bucket = google_storage_bucket.records.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.waitpoints.email}"
}

resource "google_storage_bucket_iam_member" "waitpoints_record_shards" {
  count = length(local.shard_buckets)

  bucket = google_storage_bucket.record_shards[count.index].name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.waitpoints.email}"
}

# A released job is rung on its pool's topic: publish on the jobs topics only.
resource "google_pubsub_topic_iam_member" "waitpoints_rings_jobs" {
  for_each = toset(concat(["jobs"], keys(local.pool_topics)))

  project = var.project_id
  topic   = google_pubsub_topic.topics[each.key].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.waitpoints.email}"
}

# Who may call it: var.waitpoint_invokers (allUsers by default: the token is the proof).
resource "google_cloud_run_v2_service_iam_member" "waitpoint_invokers" {
  # checkov:skip=CKV_GCP_102:A waitpoint's completion URL is called by providers outside the project; the signed token in the URL is the proof (docs/waiting.md). Set var.waitpoint_invokers to named principals to close it.
  for_each = toset(var.waitpoint_invokers)

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.waitpoints.name
  role     = "roles/run.invoker"
  member   = each.value
}

resource "google_cloudfunctions2_function" "waitpoints" {
  # checkov:skip=CKV_GCP_124:Providers outside Google call the completion URL; the signed token is checked by the code.
  name        = "${var.name_prefix}-waitpoints"
  project     = var.project_id
  location    = var.region
  description = "reclaim waitpoints (target waitpoints): POST /waitpoints/<token>"
  labels      = var.labels

  build_config {
    runtime           = "python311"
    entry_point       = "waitpoints"
    service_account   = google_service_account.builder.id
    docker_repository = google_artifact_registry_repository.functions.id

    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.source["waitpoints"].name
      }
    }
  }

  service_config {
    available_cpu                    = var.waitpoints_function.cpu
    available_memory                 = var.waitpoints_function.memory
    timeout_seconds                  = var.waitpoints_function.timeout_seconds
    max_instance_request_concurrency = var.waitpoints_function.concurrency
    min_instance_count               = var.waitpoints_function.min_instances
    max_instance_count               = var.waitpoints_function.max_instances
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.waitpoints.email
    # THREADS: functions-framework's gunicorn threads; one per concurrent request. No
    # RECLAIM_WAITPOINT_URL here: it is this function's own URL (a cycle), and it makes
    # no waitpoint.
    environment_variables = merge(local.reclaim_env, { THREADS = tostring(var.waitpoints_function.concurrency) })
  }

  lifecycle {
    precondition {
      condition     = var.waitpoints_function.concurrency >= 1 && var.waitpoints_function.concurrency <= 1000
      error_message = "waitpoints: concurrency must be 1..1000."
    }
    precondition {
      condition     = var.waitpoints_function.min_instances >= 0 && var.waitpoints_function.max_instances >= max(1, var.waitpoints_function.min_instances)
      error_message = "waitpoints: need 0 <= min_instances <= max_instances and max_instances >= 1."
    }
    precondition {
      condition     = var.waitpoints_function.concurrency == 1 || tonumber(var.waitpoints_function.cpu) >= 1
      error_message = "waitpoints: max_instance_request_concurrency > 1 needs available_cpu >= 1."
    }
  }

  depends_on = [time_sleep.grants_propagate]
}

locals {
  # What the functions that make waitpoints are told (functions.tf merges it into claim's
  # environment): the completion URL's base (shared/features/waits/keys.py).
  waits_env = {
    RECLAIM_WAITPOINT_URL = google_cloudfunctions2_function.waitpoints.service_config[0].uri
  }
}

output "waitpoints_url" {
  description = "The waitpoint completion route's base: a waitpoint's URL is <it>/waitpoints/<token> (docs/waiting.md)."
  value       = google_cloudfunctions2_function.waitpoints.service_config[0].uri
}
