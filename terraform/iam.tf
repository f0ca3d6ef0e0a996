# Identities and grants. One runtime SA per function, one invoker SA for pushes and
# the scheduler, one build SA. Every grant sits on the resource it is about (bucket,
# topic, subscription, service, SA), except three project-level grants: the build SA's
# log writer (logs have no narrower grant point) and its read of the gcf-v2-sources
# bucket, conditioned on that bucket's name because Cloud Functions creates the bucket
# on the first deploy; and the dashboard's monitoring viewer (metrics have no narrower
# grant point). No public members anywhere.

resource "google_service_account" "fn" {
  for_each = local.functions

  account_id   = "${var.name_prefix}-${replace(each.key, "_", "-")}"
  project      = var.project_id
  display_name = "reclaim ${each.key} function (runtime)"

  depends_on = [time_sleep.apis_propagate]
}

resource "google_service_account" "invoker" {
  account_id   = "${var.name_prefix}-invoker"
  project      = var.project_id
  display_name = "reclaim invoker: Pub/Sub pushes and the sweep scheduler"

  depends_on = [time_sleep.apis_propagate]
}

resource "google_service_account" "builder" {
  account_id   = "${var.name_prefix}-builder"
  project      = var.project_id
  display_name = "reclaim Cloud Build of the function archives"

  depends_on = [time_sleep.apis_propagate]
}

# --- runtime: what each function's code touches ------------------------------------

# Every function reads and CAS-writes records and markers (status reads and sweep
# recover stale jobs and drop pending markers): object CRUD, no bucket or IAM admin.
resource "google_storage_bucket_iam_member" "fn_records" {
  for_each = local.functions

  bucket = google_storage_bucket.records.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.fn[each.key].email}"
}

# The same on every record shard (var.record_shards; storage.tf).
resource "google_storage_bucket_iam_member" "fn_record_shards" {
  for_each = {
    for pair in setproduct(keys(local.functions), range(length(local.shard_buckets))) :
    "${pair[0]}-${pair[1]}" => { function = pair[0], shard = pair[1] }
  }

  bucket = google_storage_bucket.record_shards[each.value.shard].name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.fn[each.value.function].email}"
}

# claim runs the pipelines, which read the uploaded object a job was made from.
resource "google_storage_bucket_iam_member" "claim_reads_uploads" {
  bucket = google_storage_bucket.uploads.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.fn["claim"].email}"
}

# Every function may ring the doorbell (submit, requeue by sweep/status/drain).
resource "google_pubsub_topic_iam_member" "fn_rings_jobs" {
  for_each = local.functions

  project = var.project_id
  topic   = google_pubsub_topic.topics["jobs"].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${google_service_account.fn[each.key].email}"
}

# claim reads the webhook signing secrets (functions.tf), each on its own secret: no
# other function, and no project-wide accessor. Cloud Run checks this access when it
# deploys the revision, so the grant is waited for (grants_propagate) before claim.
resource "google_secret_manager_secret_iam_member" "claim_reads_webhook_secrets" {
  for_each = var.webhook_secrets

  project   = var.project_id
  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.fn["claim"].email}"

  depends_on = [time_sleep.apis_propagate]
}

# --- invocation --------------------------------------------------------------------

# The invoker SA calls the three internal functions (pushes and the scheduler).
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = toset(concat(["claim", "submit_upload", "sweep"], keys(local.pool_functions)))

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn[each.key].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.invoker.email}"
}

# Who may open the dashboard (and press its retry and cancel buttons): named principals
# only, like submit; their browser reaches it through `gcloud run services proxy`.
resource "google_cloud_run_v2_service_iam_member" "dashboard_viewers" {
  for_each = toset(var.dashboard_viewers)

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn["dashboard"].name
  role     = "roles/run.invoker"
  member   = each.value
}

# Who may submit jobs: named principals only (variable validation refuses public ones).
resource "google_cloud_run_v2_service_iam_member" "submitters" {
  for_each = toset(var.submit_invokers)

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn["submit"].name
  role     = "roles/run.invoker"
  member   = each.value
}

# The dashboard peeks at the dead letters: pull, then hand each back (deadline 0).
resource "google_pubsub_subscription_iam_member" "dashboard_reads_dead_letters" {
  project      = var.project_id
  subscription = google_pubsub_subscription.dead_letter_hold.name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${google_service_account.fn["dashboard"].email}"
}

# The dashboard's charts read the log-based metrics' time series (timeSeries.list needs
# monitoring.timeSeries.list on the project: metrics have no narrower grant point).
resource "google_project_iam_member" "dashboard_reads_metrics" {
  project = var.project_id
  role    = "roles/monitoring.viewer"
  member  = "serviceAccount:${google_service_account.fn["dashboard"].email}"
}

# A job's spans go to Cloud Trace's OTLP endpoint (the Telemetry API) from the requests
# that end an attempt (shared/traces/export.py): claim (its pushes, its Cloud Run job's
# tasks: the same account), and the watchdog's rescue in the sweep and in submit's status
# read. roles/cloudtrace.agent holds telemetry.traces.write
# (https://cloud.google.com/iam/docs/roles-permissions/cloudtrace); spans have no narrower
# grant point than the project.
resource "google_project_iam_member" "runtime_writes_traces" {
  for_each = toset(["claim", "sweep", "submit"])
  project  = var.project_id
  role     = "roles/cloudtrace.agent"
  member   = "serviceAccount:${google_service_account.fn[each.key].email}"
}

# A job's output is downloaded from a V4 signed URL (GET /jobs/<id>/outputs/<name>; the
# dashboard's links). A Cloud Run service account has no key file: the client library signs
# through the IAM Service Account Credentials API's signBlob, which needs
# iam.serviceAccounts.signBlob on the signing account itself
# (https://cloud.google.com/storage/docs/authentication/creating-signatures). Granted on
# each function's own SA only, to itself: it can sign as itself, nothing more.
resource "google_service_account_iam_member" "signs_output_urls" {
  for_each = toset(["submit", "dashboard"])

  service_account_id = google_service_account.fn[each.key].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${google_service_account.fn[each.key].email}"
}

# --- Google service agents ---------------------------------------------------------

# Pub/Sub mints the push OIDC tokens as the invoker SA: token creator on that SA only.
resource "google_service_account_iam_member" "pubsub_agent_mints_invoker_tokens" {
  service_account_id = google_service_account.invoker.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

# Dead-lettering: Pub/Sub publishes to the dead-letter topic and acks the source.
resource "google_pubsub_topic_iam_member" "pubsub_agent_dead_letters" {
  project = var.project_id
  topic   = google_pubsub_topic.topics["dead_letter"].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "pubsub_agent_acks_dead_letters" {
  for_each = local.all_pushes

  project      = var.project_id
  subscription = google_pubsub_subscription.push[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

# GCS publishes upload notifications.
resource "google_pubsub_topic_iam_member" "gcs_agent_publishes_uploads" {
  project = var.project_id
  topic   = google_pubsub_topic.topics["uploads"].name
  role    = "roles/pubsub.publisher"
  member  = local.gcs_agent
}

# --- build -------------------------------------------------------------------------

# Cloud Build fetches the archive from gcf-v2-sources-<project number>-<region>, the
# copy Cloud Functions makes of storage_source, not from our sources bucket: the
# provider's own "basic builder" acceptance test fails exactly there without this read
# (github.com/hashicorp/terraform-provider-google/issues/20571: "Access to bucket
# gcf-v2-sources-...-us-central1 denied. You must grant Storage Object Viewer
# permission to <build SA>"). That bucket does not exist before the first deploy, so
# the grant is project-level with an IAM condition naming the bucket and its objects
# (resource name formats: cloud.google.com/iam/docs/conditions-resource-attributes).
resource "google_project_iam_member" "builder_reads_gcf_sources" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = "serviceAccount:${google_service_account.builder.email}"

  condition {
    title       = "only ${local.gcf_sources_bucket}"
    description = "The build SA reads the function sources Cloud Functions copies there, nothing else."
    expression  = "resource.name == \"projects/_/buckets/${local.gcf_sources_bucket}\" || resource.name.startsWith(\"projects/_/buckets/${local.gcf_sources_bucket}/objects/\")"
  }
}

resource "google_artifact_registry_repository_iam_member" "builder_writes_images" {
  project    = var.project_id
  location   = google_artifact_registry_repository.functions.location
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.builder.email}"
}

# Build logs go to the project's log buckets; logging has no narrower grant point.
resource "google_project_iam_member" "builder_writes_logs" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.builder.email}"
}

# --- propagation --------------------------------------------------------------------

# IAM grants are eventually consistent: "typically 2 minutes, potentially 7 minutes or
# longer" (cloud.google.com/iam/docs/access-change-propagation). The provider's own
# examples wait with time_sleep before a build uses fresh grants (magic-modules
# mmv1/templates/terraform/examples/cloudfunctions2_basic_builder.tf.tmpl, 60 s); we
# wait var.iam_propagation_seconds (default 120 s, the documented typical time) once,
# after every grant whose first use happens inside this apply: the builds (functions),
# the GCS agent's publish check (storage notification), and the Pub/Sub agent's
# grants (push subscriptions), plus the runtime grants the new functions use at once.
# Grants made on the functions and subscriptions themselves (run.invoker, the agent's
# subscriber role) cannot precede them; their first users (Pub/Sub push, Cloud
# Scheduler) retry a refused call, so they need no wait (terraform/README.md).
resource "time_sleep" "grants_propagate" {
  create_duration = "${var.iam_propagation_seconds}s"

  depends_on = [
    google_project_iam_member.builder_reads_gcf_sources,
    google_project_iam_member.builder_writes_logs,
    google_artifact_registry_repository_iam_member.builder_writes_images,
    google_storage_bucket_iam_member.fn_records,
    google_storage_bucket_iam_member.fn_record_shards,
    google_storage_bucket_iam_member.claim_reads_uploads,
    google_storage_bucket_iam_member.claim_reads_routed, # uploads.tf
    google_pubsub_topic_iam_member.fn_rings_jobs,
    google_pubsub_topic_iam_member.fn_rings_pools, # pools.tf
    google_service_account_iam_member.pubsub_agent_mints_invoker_tokens,
    google_pubsub_topic_iam_member.pubsub_agent_dead_letters,
    google_pubsub_topic_iam_member.gcs_agent_publishes_uploads,
    google_pubsub_topic_iam_member.routed_gcs_agents_publish, # uploads.tf
    google_project_iam_member.dashboard_reads_metrics,
    google_service_account_iam_member.signs_output_urls,
    google_secret_manager_secret_iam_member.claim_reads_webhook_secrets,
    google_storage_bucket_iam_member.admin_records,   # admin.tf
    google_storage_bucket_iam_member.admin_record_shards, # admin.tf
    google_pubsub_topic_iam_member.admin_rings_jobs, # admin.tf
    google_project_iam_member.runtime_writes_traces,
    google_storage_bucket_iam_member.waitpoints_records,       # waitpoints.tf
    google_storage_bucket_iam_member.waitpoints_record_shards, # waitpoints.tf
    google_pubsub_topic_iam_member.waitpoints_rings_jobs,      # waitpoints.tf
  ]
}
