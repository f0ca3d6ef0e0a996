# The five gen2 functions (README "Repository layout"), built from archives that hold the
# function's folder at the root, the library's shared/ package and its public API
# (reclaim/) beside main.py, and the deployment's own pipelines package (var.pipelines_dir,
# default the repo's pipelines/). The library is var.library_dir: this repository, or the
# copy of the installed reclaim that `reclaim tf-module` writes (docs/library.md).
# tests/terraform/test_tf_packaging.py builds the same archives, imports each entry
# point from them alone and runs the example pipeline from one.

locals {
  repo_root = (var.library_dir == "" ? abspath("${path.module}/..")
  : startswith(var.library_dir, "/") ? var.library_dir : abspath("${path.root}/${var.library_dir}"))

  # What an archive never carries: bytecode and caches (file() reads text only).
  _skip = ["__pycache__/", ".pyc", ".pyo", ".so", ".DS_Store"]

  shared_files = [
    for f in fileset("${local.repo_root}/shared", "**") : f
    if !anytrue([for s in local._skip : strcontains(f, s)])
  ]

  # Your pipelines: a package folder outside the library, shipped under its own name
  # (pipelines/ -> pipelines.*; a folder named acme_jobs -> acme_jobs.*) and imported
  # through RECLAIM_PIPELINE_MODULES (var.pipeline_modules).
  pipelines_dir = (var.pipelines_dir == "" ? "${local.repo_root}/pipelines"
  : startswith(var.pipelines_dir, "/") ? var.pipelines_dir : abspath("${path.root}/${var.pipelines_dir}"))
  pipelines_package = basename(local.pipelines_dir)
  pipeline_files = [
    for f in fileset(local.pipelines_dir, "**") : f
    if !anytrue([for s in local._skip : strcontains(f, s)])
  ]
  # The public API your pipelines import (`from reclaim import ...`): its files only.
  api_files = ["__init__.py", "install.py", "VERSION", "py.typed"]
  # Every .py an archive carries outside the function folder, by archive path.
  archive_python_files = toset(concat(
    [for f in local.shared_files : "shared/${f}" if endswith(f, ".py")],
    ["reclaim/__init__.py", "reclaim/install.py"],
    [for f in local.pipeline_files : "${local.pipelines_package}/${f}" if endswith(f, ".py")],
  ))

  # archive path => file on disk, per source folder. The root requirements.txt comes
  # first so a function folder's own copy wins; the function folder comes last so
  # nothing can shadow its main.py.
  archives = {
    # (admin: the operator routes' function, admin.tf; waitpoints: waitpoints.tf)
    for src in distinct(concat([for f in values(local.functions) : f.source], ["admin", "waitpoints"])) : src => merge(
      { "requirements.txt" = "${local.repo_root}/requirements.txt" },
      { for f in local.shared_files : "shared/${f}" => "${local.repo_root}/shared/${f}" },
      { for f in local.api_files : "reclaim/${f}" => "${local.repo_root}/reclaim/${f}" },
      {
        for f in local.pipeline_files :
        "${local.pipelines_package}/${f}" => "${local.pipelines_dir}/${f}"
      },
      # the schedules and routes files terraform read, as the package's own (main.tf
      # names them so): schedules.tf, uploads.tf
      { for f, path in local.package_settings_files : "${local.pipelines_package}/${f}" => path },
      {
        for f in fileset("${local.repo_root}/functions/${src}", "**") :
        f => "${local.repo_root}/functions/${src}/${f}"
        if !anytrue([for s in local._skip : strcontains(f, s)])
      },
    )
  }

  # Only the two doors people use take traffic from outside Google (submit, and the
  # dashboard, which `gcloud run services proxy` reaches from an operator's machine:
  # "if the Cloud Run Service is configured to only allow internal ingress, this command
  # will not work", cloud.google.com/sdk/gcloud/reference/run/services/proxy); IAM still
  # admits only the named principals. Pub/Sub push and Cloud Scheduler count as
  # internal sources for Cloud Run ingress.
  ingress = {
    submit        = "ALLOW_ALL"
    submit_upload = "ALLOW_INTERNAL_ONLY"
    claim         = "ALLOW_INTERNAL_ONLY"
    sweep         = "ALLOW_INTERNAL_ONLY"
    dashboard     = "ALLOW_ALL"
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

  depends_on = [time_sleep.apis_propagate]
}

resource "google_cloudfunctions2_function" "fn" {
  # checkov:skip=CKV_GCP_124:Only submit and dashboard are ALLOW_ALL (local.ingress): submit is the HTTP front door users curl, the dashboard is reached through gcloud run services proxy; IAM still admits only var.submit_invokers / var.dashboard_viewers (run.invoker); the other three are ALLOW_INTERNAL_ONLY.
  # The five functions and each pool's claim (pools.tf): claim_<pool>, <prefix>-claim-<pool>.
  for_each = local.all_functions

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
    ingress_settings                 = local.ingress[local.identity[each.key]]
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.fn[local.identity[each.key]].email
    # THREADS: functions-framework's gunicorn threads; one per concurrent request. A
    # pool's claim gets its pool's RECLAIM_* on top (pools.tf, local.pool_env).
    # Claim (every pool's) makes waitpoints: their completion URL's base (waitpoints.tf).
    environment_variables = merge(
      local.reclaim_env,
      local.pool_env[each.key],
      { for k, v in local.waits_env : k => v if local.identity[each.key] == "claim" },
      { THREADS = tostring(each.value.concurrency) },
    )

    # The webhook signing secrets (var.webhook_secrets): claim runs the webhook pipeline,
    # so only claim gets them, as RECLAIM_WEBHOOK_SECRET_<NAME> variables read from Secret
    # Manager when an instance starts (cloud.google.com/functions/docs/configuring/secrets;
    # the field is not Computed: a secret added by hand is removed by the next apply).
    dynamic "secret_environment_variables" {
      for_each = local.identity[each.key] == "claim" ? var.webhook_secrets : {}
      content {
        key        = "RECLAIM_WEBHOOK_SECRET_${secret_environment_variables.key}"
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = "latest"
      }
    }
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
      condition     = each.value.timeout_seconds >= try(local.all_pushes[each.key].settings.ack_deadline_seconds, 0)
      error_message = "${each.key}: timeout_seconds must be >= the ack deadline of the subscription that pushes to it."
    }
    # A module the archive does not carry would make every function answer 500
    # "misconfigured": refuse it at plan time instead.
    precondition {
      condition = alltrue([
        for m in var.pipeline_modules : length(setintersection(
          local.archive_python_files, ["${replace(m, ".", "/")}.py", "${replace(m, ".", "/")}/__init__.py"]
        )) > 0
      ])
      error_message = "every pipeline_modules entry must be a module the archives carry: in shared/ or in ${local.pipelines_dir} (shipped as ${local.pipelines_package}/)."
    }
    # A bad pools file (pools.tf) fails the plan, naming the pool, before anything changes.
    precondition {
      condition     = length(local.pool_problems) == 0
      error_message = "${local.pools_path}: ${join("; ", local.pool_problems)}"
    }
  }

  # The build uses the builder's fresh grants (iam.tf): wait for them to propagate. With
  # job pools, the functions come after the Cloud Run jobs and their grants (run_jobs.tf):
  # a pool's claim never dispatches to a job that does not exist yet, may not be run yet,
  # or still runs the image of the previous deploy (the job is updated first).
  depends_on = [time_sleep.grants_propagate, time_sleep.run_jobs_grants_propagate]
}
