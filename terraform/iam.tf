# Identities and grants. One runtime SA per function, one invoker SA for pushes and
# the scheduler, one build SA. Every grant sits on the resource it is about (bucket,
# topic, subscription, service, SA); the only project-level grant is the build's
# log writer, which has no narrower resource. No public members anywhere.

resource "google_service_account" "fn" {
  for_each = local.functions

  account_id   = "${var.name_prefix}-${replace(each.key, "_", "-")}"
  project      = var.project_id
  display_name = "reclaim ${each.key} function (runtime)"

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "invoker" {
  account_id   = "${var.name_prefix}-invoker"
  project      = var.project_id
  display_name = "reclaim invoker: Pub/Sub pushes and the sweep scheduler"

  depends_on = [google_project_service.enabled]
}

resource "google_service_account" "builder" {
  account_id   = "${var.name_prefix}-builder"
  project      = var.project_id
  display_name = "reclaim Cloud Build of the function archives"

  depends_on = [google_project_service.enabled]
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

# --- invocation --------------------------------------------------------------------

# The invoker SA calls the three internal functions (pushes and the scheduler).
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = toset(["claim", "submit_upload", "sweep"])

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.fn[each.key].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.invoker.email}"
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
  for_each = local.pushes

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

resource "google_storage_bucket_iam_member" "builder_reads_sources" {
  bucket = google_storage_bucket.sources.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.builder.email}"
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
