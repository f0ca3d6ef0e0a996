# The four gen2 functions (README "Repository layout"), built from archives that hold the
# function's folder at the root plus the repo's shared/ package beside main.py.
# tests/terraform/test_packaging.py builds the same archives and imports each
# entry point from them alone.

locals {
  repo_root = abspath("${path.module}/..")

  # What an archive never carries: bytecode and caches (file() reads text only).
  _skip = ["__pycache__/", ".pyc", ".pyo", ".so", ".DS_Store"]

  shared_files = [
    for f in fileset("${local.repo_root}/shared", "**") : f
    if !anytrue([for s in local._skip : strcontains(f, s)])
  ]

  # archive path => file on disk, per source folder. The root requirements.txt comes
  # first so a function folder's own copy wins.
  archives = {
    for src in distinct([for f in values(local.functions) : f.source]) : src => merge(
      { "requirements.txt" = "${local.repo_root}/requirements.txt" },
      { for f in local.shared_files : "shared/${f}" => "${local.repo_root}/shared/${f}" },
      {
        for f in fileset("${local.repo_root}/functions/${src}", "**") :
        f => "${local.repo_root}/functions/${src}/${f}"
        if !anytrue([for s in local._skip : strcontains(f, s)])
      },
    )
  }

  # Only the public front door takes traffic from outside Google; Pub/Sub push and
  # Cloud Scheduler count as internal sources for Cloud Run ingress.
  ingress = {
    submit        = "ALLOW_ALL"
    submit_upload = "ALLOW_INTERNAL_ONLY"
    claim         = "ALLOW_INTERNAL_ONLY"
    sweep         = "ALLOW_INTERNAL_ONLY"
  }
}

data "archive_file" "source" {
  for_each = local.archives

  type        = "zip"
  output_path = "${path.module}/build/${each.key}.zip"

  dynamic "source" {
    for_each = each.value
    content {
      filename = source.key
      content  = file(source.value)
    }
  }
}

# Named by content hash: a code change is a new object, hence a new build and revision.
resource "google_storage_bucket_object" "source" {
  for_each = data.archive_file.source

  name         = "${each.key}-${each.value.output_sha256}.zip"
  bucket       = google_storage_bucket.sources.name
  source       = each.value.output_path
  content_type = "application/zip"
}

resource "google_artifact_registry_repository" "functions" {
  # checkov:skip=CKV_GCP_84:Holds only images built from this repository's public source; Google-managed encryption applies. Set kms_key_name if your policy demands CMEK.
  repository_id = "${var.name_prefix}-functions"
  project       = var.project_id
  location      = var.region
  format        = "DOCKER"
  description   = "Images Cloud Build makes from the reclaim function archives."
  labels        = var.labels

  depends_on = [google_project_service.enabled]
}

resource "google_cloudfunctions2_function" "fn" {
  # checkov:skip=CKV_GCP_124:Only submit is ALLOW_ALL (local.ingress): it is the HTTP front door users curl, and IAM still admits only var.submit_invokers (run.invoker); the other three are ALLOW_INTERNAL_ONLY.
  for_each = local.functions

  name        = "${var.name_prefix}-${replace(each.key, "_", "-")}"
  project     = var.project_id
  location    = var.region
  description = "reclaim ${each.key} (target ${each.value.entry_point})"
  labels      = var.labels

  build_config {
    runtime           = "python311"
    entry_point       = each.value.entry_point
    service_account   = google_service_account.builder.id
    docker_repository = google_artifact_registry_repository.functions.id

    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.source[each.value.source].name
      }
    }
  }

  service_config {
    available_cpu                    = each.value.cpu
    available_memory                 = each.value.memory
    timeout_seconds                  = each.value.timeout_seconds
    max_instance_request_concurrency = each.value.concurrency
    min_instance_count               = each.value.min_instances
    max_instance_count               = each.value.max_instances
    ingress_settings                 = local.ingress[each.key]
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.fn[each.key].email
    # THREADS: functions-framework's gunicorn threads; one per concurrent request.
    environment_variables = merge(local.reclaim_env, { THREADS = tostring(each.value.concurrency) })
  }

  lifecycle {
    precondition {
      condition     = each.value.concurrency >= 1 && each.value.concurrency <= 1000
      error_message = "${each.key}: concurrency must be 1..1000."
    }
    precondition {
      condition     = each.value.concurrency == 1 || tonumber(each.value.cpu) >= 1
      error_message = "${each.key}: max_instance_request_concurrency > 1 needs available_cpu >= 1."
    }
    precondition {
      condition     = each.value.min_instances >= 0 && each.value.max_instances >= max(1, each.value.min_instances)
      error_message = "${each.key}: need 0 <= min_instances <= max_instances and max_instances >= 1."
    }
    # A push waits ack_deadline_seconds for the answer; the function must not be cut
    # off before Pub/Sub stops waiting (longer work is redelivered and the duplicate
    # finds the job running-and-fresh).
    precondition {
      condition     = each.value.timeout_seconds >= try(local.pushes[each.key].settings.ack_deadline_seconds, 0)
      error_message = "${each.key}: timeout_seconds must be >= the ack deadline of the subscription that pushes to it."
    }
  }

  depends_on = [
    google_project_service.enabled,
    google_artifact_registry_repository_iam_member.builder_writes_images,
    google_storage_bucket_iam_member.builder_reads_sources,
    google_project_iam_member.builder_writes_logs,
  ]
}
