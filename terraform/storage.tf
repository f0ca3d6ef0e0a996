# Buckets: records (the queue itself), uploads (GCS notifications feed submit_upload;
# kept apart so records never trigger submit), sources (function archives).
#
# Keeping old bytes (terraform/README.md, "Versioning, soft delete and their cost"):
# Cloud Storage soft delete "preserves objects and buckets that get deleted or
# overwritten" for its retention, 7 days by default on new buckets, billed as storage
# meanwhile (cloud.google.com/storage/docs/soft-delete). Object Versioning keeps a
# noncurrent version of each overwrite on top of that. So:
# - records: soft delete only (var.soft_delete_days.records, 7 d). Every CAS write and
#   heartbeat overwrites a record; soft delete keeps each old generation restorable
#   for 7 days, versioning would add a second copy of every one for no new protection.
# - uploads: versioning, no soft delete. upload-digest reads exactly the generation
#   that was uploaded, which must stay readable if the object is overwritten before
#   the job runs; a noncurrent version is readable, a soft-deleted one is not.
# - sources: versioning, no soft delete: archives are named by content hash, never
#   overwritten, and rebuildable from the repository.

resource "google_storage_bucket" "records" {
  # checkov:skip=CKV_GCP_62:Access is audited by Cloud Audit Logs (Data Access) on the project; legacy usage-log buckets would only add a second unhardened bucket.
  # checkov:skip=CKV_GCP_78:Versioning is replaced by soft delete (soft_delete_policy below): every overwritten or deleted record generation stays restorable for soft_delete_days.records, without a second noncurrent copy of every heartbeat.
  name                        = local.buckets.records
  project                     = var.project_id
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets
  labels                      = var.labels

  versioning {
    enabled = false
  }

  soft_delete_policy {
    retention_duration_seconds = var.soft_delete_days.records * 86400
  }

  # Finished records expire: the store stamps a terminal record's custom time with
  # terminal time + retention_days[state] (terraform/README.md, "Retention of finished jobs"); queued/running
  # records carry no custom time, so no rule here can ever delete a pending job.
  lifecycle_rule {
    condition {
      matches_prefix                      = ["jobs/"]
      days_since_custom_time              = 0
      send_days_since_custom_time_if_zero = true
      with_state                          = "LIVE"
    }
    action {
      type = "Delete"
    }
  }

  # Stage outputs, batch markers and tag markers (docs/api.md, "Tags") outlive the longest
  # record retention by a day.
  lifecycle_rule {
    condition {
      matches_prefix = ["outputs/", "batches/", "tags/"]
      age            = max(values(var.retention_days)...) + 1
      with_state     = "LIVE"
    }
    action {
      type = "Delete"
    }
  }

  # Flow control (docs/flow-control.md): rate tokens are never read after their window,
  # and the failed/cancelled index outlives the records it points at by a day.
  lifecycle_rule {
    condition {
      matches_prefix = ["rates/"]
      age            = 1
      with_state     = "LIVE"
    }
    action {
      type = "Delete"
    }
  }
  lifecycle_rule {
    condition {
      matches_prefix = ["ended/"]
      age            = max(values(var.retention_days)...) + 1
      with_state     = "LIVE"
    }
    action {
      type = "Delete"
    }
  }

  # Bulk confirm tokens (shared/bulk.py): a used token's marker matters only until the
  # token expires (CONFIRM_TTL, 15 minutes), so a day later it goes.
  lifecycle_rule {
    condition {
      matches_prefix = ["bulk/used/"]
      age            = 1
      with_state     = "LIVE"
    }
    action {
      type = "Delete"
    }
  }

  # Versions left from before versioning was turned off (earlier deployments) expire.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_retention_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [time_sleep.apis_propagate]
}

# Record shards (var.record_shards > 1; docs/capacity.md, "Sharding"): the same bucket as
# records for the job objects a hash of the job id sends here (jobs/, pending/, batches/,
# outputs/). Index objects stay in records, so only the record and output rules apply.
resource "google_storage_bucket" "record_shards" {
  # checkov:skip=CKV_GCP_62:Access is audited by Cloud Audit Logs (Data Access) on the project, as for the records bucket.
  # checkov:skip=CKV_GCP_78:Versioning is replaced by soft delete, as for the records bucket.
  count = length(local.shard_buckets)

  name                        = local.shard_buckets[count.index]
  project                     = var.project_id
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets
  labels                      = var.labels

  versioning {
    enabled = false
  }

  soft_delete_policy {
    retention_duration_seconds = var.soft_delete_days.records * 86400
  }

  lifecycle_rule {
    condition {
      matches_prefix                      = ["jobs/"]
      days_since_custom_time              = 0
      send_days_since_custom_time_if_zero = true
      with_state                          = "LIVE"
    }
    action {
      type = "Delete"
    }
  }

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

  depends_on = [time_sleep.apis_propagate]
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

  soft_delete_policy {
    retention_duration_seconds = var.soft_delete_days.uploads * 86400
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

  depends_on = [time_sleep.apis_propagate]
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

  soft_delete_policy {
    retention_duration_seconds = 0
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

  depends_on = [time_sleep.apis_propagate]
}

# The uploads bucket's notifications, one per prefix the upload routes need: uploads.tf.
