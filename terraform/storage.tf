# Buckets: records (the queue itself), uploads (GCS notifications feed submit_upload;
# kept apart so records never trigger submit), sources (function archives).

resource "google_storage_bucket" "records" {
  # checkov:skip=CKV_GCP_62:Access is audited by Cloud Audit Logs (Data Access) on the project; legacy usage-log buckets would only add a second unhardened bucket.
  name                        = local.buckets.records
  project                     = var.project_id
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets
  labels                      = var.labels

  versioning {
    enabled = true
  }

  # Finished records expire: the store stamps a terminal record's custom time with
  # terminal time + retention_days[state] (README "Retention"); queued/running
  # records carry no custom time, so no rule here can ever delete a pending job.
  lifecycle_rule {
    condition {
      matches_prefix                       = ["jobs/"]
      days_since_custom_time               = 0
      send_days_since_custom_time_if_zero  = true
      with_state                           = "LIVE"
    }
    action {
      type = "Delete"
    }
  }

  # Stage outputs and batch markers outlive the longest record retention by a day.
  lifecycle_rule {
    condition {
      matches_prefix = ["outputs/", "batches/"]
      age            = max(values(var.retention_days)...) + 1
      with_state     = "LIVE"
    }
    action {
      type = "Delete"
    }
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_retention_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}

resource "google_storage_bucket" "uploads" {
  # checkov:skip=CKV_GCP_62:Access is audited by Cloud Audit Logs (Data Access) on the project; legacy usage-log buckets would only add a second unhardened bucket.
  name                        = local.buckets.uploads
  project                     = var.project_id
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets
  labels                      = var.labels

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_retention_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}

resource "google_storage_bucket" "sources" {
  # checkov:skip=CKV_GCP_62:Holds only build inputs named by content hash; access is audited by Cloud Audit Logs on the project.
  name                        = local.buckets.sources
  project                     = var.project_id
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true # only rebuildable archives live here
  labels                      = var.labels

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_retention_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.enabled]
}

# Every finished upload rings the uploads topic; submit_upload turns it into a job.
resource "google_storage_notification" "uploads" {
  bucket             = google_storage_bucket.uploads.name
  topic              = google_pubsub_topic.topics["uploads"].id
  payload_format     = "JSON_API_V1"
  event_types        = ["OBJECT_FINALIZE"]
  object_name_prefix = var.uploads_prefix == "" ? null : var.uploads_prefix

  depends_on = [google_pubsub_topic_iam_member.gcs_agent_publishes_uploads]
}
