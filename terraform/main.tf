# APIs, identities of Google's service agents, the propagation waits, and the names
# and settings everything else is built from.

locals {
  apis = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com", # signBlob: submit and the dashboard sign output URLs
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
    "telemetry.googleapis.com", # a job's spans over OTLP (shared/traces/export.py;
    # cloud.google.com/trace/docs/migrate-to-otlp-endpoints)
    "cloudtrace.googleapis.com", # where they are read
  ])

  # The one version (reclaim/VERSION): the wheel's, the library's, this module's.
  reclaim_version = trimspace(file("${local.repo_root}/reclaim/VERSION"))

  # Names shared with the local launcher (local/wiring.py; a test compares them).
  topics = {
    jobs        = "${var.name_prefix}-jobs"
    uploads     = "${var.name_prefix}-uploads"
    dead_letter = "${var.name_prefix}-dead-letter"
  }
  subscriptions = {
    claim            = "${var.name_prefix}-claim"
    submit_upload    = "${var.name_prefix}-submit-upload"
    dead_letter_hold = "${var.name_prefix}-dead-letter-hold"
  }
  # Bucket names are global: scope them by project.
  buckets = {
    records = "${var.project_id}-${var.name_prefix}-records"
    uploads = "${var.project_id}-${var.name_prefix}-uploads"
    sources = "${var.project_id}-${var.name_prefix}-sources"
  }
  # Record buckets beside records (var.record_shards - 1 of them; storage.tf).
  shard_buckets = [for i in range(1, var.record_shards) : "${local.buckets.records}-${i}"]

  # Every variable shared/config.py ENV_VARS declares, and nothing else
  # (tests/terraform/test_config.py reads that list from the code). A push's deadline
  # is the claim subscription's ack deadline: functions.tf keeps claim's timeout at
  # least that long, so it is claim's time budget for the jobs it drains.
  reclaim_env = {
    RECLAIM_PROJECT                    = var.project_id
    RECLAIM_RECORDS_BUCKET             = local.buckets.records
    RECLAIM_SHARD_BUCKETS              = join(",", local.shard_buckets)
    RECLAIM_LEGACY_NAMES               = tostring(var.legacy_record_names)
    RECLAIM_UPLOADS_BUCKET             = local.buckets.uploads
    RECLAIM_JOBS_TOPIC                 = local.topics.jobs
    RECLAIM_MAX_CONCURRENT             = tostring(local.functions.claim.concurrency)
    RECLAIM_STALE_SECONDS              = tostring(var.queue.stale_seconds)
    RECLAIM_ROLLOUT_SKEW_SECONDS       = tostring(var.queue.rollout_skew_seconds)
    RECLAIM_MAX_ATTEMPTS               = tostring(var.queue.max_attempts)
    RECLAIM_BACKOFF_BASE_SECONDS       = tostring(var.queue.backoff_base_seconds)
    RECLAIM_BACKOFF_MAX_SECONDS        = tostring(var.queue.backoff_max_seconds)
    RECLAIM_RETRY_WAIT_SECONDS         = tostring(var.queue.retry_wait_seconds)
    RECLAIM_CLOCK_SKEW_SECONDS         = tostring(var.queue.clock_skew_seconds)
    RECLAIM_MIN_WRITE_INTERVAL_SECONDS = tostring(var.queue.min_write_interval_seconds)
    RECLAIM_SWEEP_MAX_JOBS             = tostring(var.queue.sweep_max_jobs)
    RECLAIM_SWEEP_MAX_SECONDS          = tostring(var.queue.sweep_max_seconds)
    RECLAIM_DRAIN_MAX_JOBS             = tostring(var.queue.drain_max_jobs)
    RECLAIM_DRAIN_JOB_SECONDS          = tostring(var.queue.drain_job_seconds)
    RECLAIM_PUSH_DEADLINE_SECONDS      = tostring(var.claim_push.ack_deadline_seconds)
    # Cloud Run's SIGTERM-to-SIGKILL, fixed at 10 s: not a variable
    # (https://cloud.google.com/run/docs/container-contract#instance-shutdown)
    RECLAIM_SHUTDOWN_GRACE_SECONDS = "10"
    RECLAIM_MAX_BODY_BYTES             = tostring(var.queue.max_body_bytes)
    RECLAIM_MAX_BATCH_JOBS             = tostring(var.queue.max_batch_jobs)
    RECLAIM_RETENTION_DAYS_DONE        = tostring(var.retention_days.done)
    RECLAIM_RETENTION_DAYS_FAILED      = tostring(var.retention_days.failed)
    RECLAIM_RETENTION_DAYS_CANCELLED   = tostring(var.retention_days.cancelled)
    RECLAIM_PIPELINE_MODULES           = join(",", var.pipeline_modules)
    RECLAIM_UPLOADS_FILE               = local.uploads_setting # uploads.tf
    RECLAIM_DEAD_LETTER_SUBSCRIPTION   = local.subscriptions.dead_letter_hold
    RECLAIM_METRICS_SOURCE             = "monitoring:${var.name_prefix}"
    RECLAIM_LOG_LEVEL                  = var.queue.log_level
    RECLAIM_IAP_AUDIENCE               = var.iap_audience
    # the file terraform makes the cron jobs from (schedules.tf), by its archive path
    RECLAIM_SCHEDULES_FILE = "${local.pipelines_package}/schedules.json"
    # the pools file terraform made the pools from (pools.tf); a pool's claim gets its
    # RECLAIM_POOL (local.pool_env), every other function serves the default pool
    RECLAIM_POOLS_FILE = local.pools_setting
    RECLAIM_POOL       = ""
  }

  # The entry points (README "Repository layout"): source folder, target, sizing.
  functions = {
    submit        = merge(var.submit_function, { source = "submit", entry_point = "submit" })
    submit_upload = merge(var.submit_upload_function, { source = "submit", entry_point = "submit_upload" })
    claim         = merge(var.claim_function, { source = "claim", entry_point = "claim" })
    sweep         = merge(var.sweep_function, { source = "sweep", entry_point = "sweep" })
    dashboard     = merge(var.dashboard_function, { source = "dashboard", entry_point = "dashboard" })
  }
  # Pushed functions: the subscription that feeds each, and its topic.
  pushes = {
    claim = {
      subscription = local.subscriptions.claim
      topic        = "jobs"
      settings     = var.claim_push
    }
    submit_upload = {
      subscription = local.subscriptions.submit_upload
      topic        = "uploads"
      settings     = var.submit_upload_push
    }
  }

  # Google's service agents, from calls that also create them when they do not exist
  # yet (a fresh project has neither until something asks): granting to an agent that
  # does not exist fails the apply.
  pubsub_agent = "serviceAccount:${google_project_service_identity.pubsub.email}"
  gcs_agent    = "serviceAccount:${data.google_storage_project_service_account.this.email_address}"

  # Cloud Functions copies each source archive into its own bucket and Cloud Build
  # fetches it from there (cloud.google.com/functions/docs/building: "function code is
  # stored in a separate source bucket ... gcf-v2-sources-PROJECT_NUMBER-REGION").
  gcf_sources_bucket = "gcf-v2-sources-${data.google_project.this.number}-${var.region}"
}

resource "google_project_service" "enabled" {
  for_each = local.apis

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

# An API answers "has not been used in project ... or it is disabled" for a while
# after it is enabled; everything that calls one waits for this once. A new entry in
# local.apis replaces the wait, so an added API is waited for too.
resource "time_sleep" "apis_propagate" {
  create_duration = "60s"
  triggers        = { apis = join(",", sort(tolist(local.apis))) }

  depends_on = [google_project_service.enabled]
}

# The data sources below wait for this one, which has no triggers: a data source whose
# depends_on has a planned change is read at apply time, so with apis_propagate (replaced
# whenever local.apis changes) their values would be unknown at plan and the grants built
# from them (builder_reads_gcf_sources, gcs_agent_publishes_uploads) would be replaced,
# destroy first, on every change of the API list
# (developer.hashicorp.com/terraform/language/data-sources#data-resource-dependencies).
resource "time_sleep" "first_apis_propagate" {
  create_duration = "60s"

  depends_on = [google_project_service.enabled]
}

data "google_project" "this" {
  project_id = var.project_id

  depends_on = [time_sleep.first_apis_propagate]
}

# The Cloud Storage service agent (publishes the upload notifications). Reading it
# calls projects.serviceAccount.get, which creates the agent if it does not exist
# (registry.terraform.io/providers/hashicorp/google/6.50.0/docs/data-sources/storage_project_service_account).
data "google_storage_project_service_account" "this" {
  project = var.project_id

  depends_on = [time_sleep.first_apis_propagate]
}

# The Pub/Sub service agent (mints push tokens, dead-letters). generateServiceIdentity
# creates it if needed and returns its email; 6.x has this resource in google-beta only
# (registry.terraform.io/providers/hashicorp/google-beta/6.50.0/docs/resources/project_service_identity,
# cloud.google.com/service-usage/docs/reference/rest/v1beta1/services/generateServiceIdentity).
resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [time_sleep.apis_propagate]
}
