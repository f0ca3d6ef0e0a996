# Long stages on Cloud Run jobs (docs/long-stages.md): one google_cloud_run_v2_job per job
# pool (a pool whose runner is "job"). Its claim function claims as always, then starts an
# execution of the pool's job with the job id and the claim's generation as env overrides
# (cloud.google.com/run/docs/execute/jobs-with-overrides); the execution's one task adopts
# the claim and runs the stages (functions/claim/task.py). reclaim counts the attempts, so
# the job's own retries are 0.
#
# The image. A job runs a container image, and `terraform apply` must build it with no
# tool on the user's machine. Cloud Functions builds one from claim's archive already
# (Cloud Build, buildpacks), but with the functions' default security policy, automatic
# base image updates, a function's image holds the application layers only: "services with
# automatic updates enabled must provide an application image without the base operating
# system layer" (cloud.google.com/run/docs/configuring/services/automatic-base-image-updates,
# default for functions: cloud.google.com/functions/docs/securing/execution-environment-security),
# and a Cloud Run job (hashicorp/google 6.50) has no base_image_uri to run such an image on.
# So a second function, reclaim-task-image, is deployed from the very archive claim is
# built from (same code, pipelines and requirements) with on_deploy_update_policy: its
# image is whole (base and runtime patched at each deploy, which every code change is:
# the archive is named by content hash). It is never invoked (internal ingress, no
# invoker grant, scales to zero: it costs nothing while idle). The job reads the image its
# Cloud Run service runs (a gen2 function is a Cloud Run service: service_config.service,
# read back with data.google_cloud_run_v2_service) and runs it with the command
# overridden: the buildpacks launcher, which sets up the image's environment and runs
# `python task.py` (buildpacks.io/docs/for-app-developers/how-to/build-outputs/specify-launch-process).

locals {
  # Each pool whose runner is "job" (pools.tf, from the pools file) with its Cloud Run
  # job's sizing: the pool's `job` object, defaulted.
  job_specs = {
    for name, p in local.job_pools : name => {
      task_timeout_seconds = try(p.job.task_timeout_seconds, 86400)
      memory               = try(p.job.memory, "4Gi")
      cpu                  = try(p.job.cpu, "2")
      gpu = try(p.job.gpu, null) == null ? null : {
        type  = p.job.gpu.type
        count = try(p.job.gpu.count, 1)
      }
    }
  }

  # The Cloud Run job of each job pool, by pool name (RECLAIM_RUN_JOB of its claim function).
  run_jobs = {
    for pool, _ in local.job_pools :
    pool => "projects/${var.project_id}/locations/${var.region}/jobs/${var.name_prefix}-${replace(pool, "_", "-")}-task"
  }
}

resource "google_cloudfunctions2_function" "task_image" {
  # checkov:skip=CKV_GCP_124:ALLOW_INTERNAL_ONLY and no invoker: the function is never called, only its built image is used.
  count = length(local.job_pools) > 0 ? 1 : 0

  name        = "${var.name_prefix}-task-image"
  project     = var.project_id
  location    = var.region
  description = "reclaim: builds the whole image the Cloud Run jobs run (claim's archive); never invoked"
  labels      = var.labels

  build_config {
    runtime           = "python311"
    entry_point       = "claim"
    service_account   = google_service_account.builder.id
    docker_repository = google_artifact_registry_repository.functions.id

    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.source["claim"].name
      }
    }

    # a whole image (base layers included), patched at each deploy
    on_deploy_update_policy {}
  }

  service_config {
    available_memory      = "256Mi"
    min_instance_count    = 0
    max_instance_count    = 1
    ingress_settings      = "ALLOW_INTERNAL_ONLY"
    service_account_email = google_service_account.fn["claim"].email
    environment_variables = local.reclaim_env
  }

  depends_on = [time_sleep.grants_propagate] # the build's grants, as for the functions
}

data "google_cloud_run_v2_service" "task_image" {
  count = length(local.job_pools) > 0 ? 1 : 0

  name     = basename(google_cloudfunctions2_function.task_image[0].service_config[0].service)
  project  = var.project_id
  location = var.region
}

resource "google_cloud_run_v2_job" "pool" {
  for_each = local.job_specs

  name                = basename(local.run_jobs[each.key])
  project             = var.project_id
  location            = var.region
  labels              = merge(var.labels, { reclaim-pool = each.key })
  deletion_protection = false

  template {
    task_count  = 1
    parallelism = 1

    template {
      max_retries     = 0 # reclaim counts attempts: a failed execution is rescued by the sweep
      timeout         = "${each.value.task_timeout_seconds}s"
      service_account = google_service_account.fn["claim"].email

      # GPUs on jobs (cloud.google.com/run/docs/configuring/jobs/gpu): an accelerator, its
      # count in the limits, at least 4 CPU and 16 GiB
      dynamic "node_selector" {
        for_each = each.value.gpu == null ? [] : [each.value.gpu]
        content {
          accelerator = node_selector.value.type
        }
      }
      gpu_zonal_redundancy_disabled = each.value.gpu == null ? null : true

      containers {
        image       = data.google_cloud_run_v2_service.task_image[0].template[0].containers[0].image
        command     = ["/cnb/lifecycle/launcher"]
        args        = ["python", "task.py"]
        working_dir = "/workspace"

        resources {
          limits = merge(
            { cpu = each.value.cpu, memory = each.value.memory },
            each.value.gpu == null ? {} : { "nvidia.com/gpu" = tostring(each.value.gpu.count) },
          )
        }

        # claim's settings, and the pools contract's: the task reads the job it belongs to
        dynamic "env" {
          for_each = merge(local.reclaim_env, {
            RECLAIM_RUNNER  = "job"
            RECLAIM_RUN_JOB = local.run_jobs[each.key]
            RECLAIM_RUN_API = "https://run.googleapis.com"
          })
          content {
            name  = env.key
            value = env.value
          }
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = each.value.task_timeout_seconds >= 1 && each.value.task_timeout_seconds <= (each.value.gpu == null ? 604800 : 3600)
      error_message = "${each.key}: task_timeout_seconds must be 1..604800 (168 h), or 1..3600 with a GPU (cloud.google.com/run/docs/configuring/task-timeout)."
    }
    precondition {
      condition     = each.value.gpu == null || try(each.value.gpu.type, "") == "nvidia-l4"
      error_message = "${each.key}: gpu.type must be nvidia-l4, the GPU Cloud Run jobs offer (cloud.google.com/run/docs/configuring/jobs/gpu)."
    }
    precondition {
      condition     = each.value.gpu == null || tonumber(each.value.cpu) >= 4
      error_message = "${each.key}: a GPU job needs at least 4 CPU (cloud.google.com/run/docs/configuring/jobs/gpu)."
    }
  }
}

# Only claim's service account may start executions, with overrides (the job id and the
# claim generation); Cloud Run Jobs Executor With Overrides is the narrowest role that
# holds run.jobs.runWithOverrides (cloud.google.com/run/docs/reference/iam/roles).
resource "google_cloud_run_v2_job_iam_member" "claim_runs" {
  for_each = local.job_specs

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_job.pool[each.key].name
  role     = "roles/run.jobsExecutorWithOverrides"
  member   = "serviceAccount:${google_service_account.fn["claim"].email}"
}

# The sweep reads each running job's execution (run.executions.get) to rescue the job of
# an execution that ended: a viewer of the job, nothing more.
resource "google_cloud_run_v2_job_iam_member" "sweep_reads" {
  for_each = local.job_specs

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_job.pool[each.key].name
  role     = "roles/run.viewer"
  member   = "serviceAccount:${google_service_account.fn["sweep"].email}"
}
