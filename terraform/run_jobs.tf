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
# overridden: the buildpacks launcher, which sets up the image's environment, then
# `-- python3 task.py`: "By passing `--` before the command, we instruct the launcher to
# start the provided process without bash"
# (buildpacks.io/docs/for-app-developers/how-to/build-outputs/specify-launch-process), so
# Python itself is the container's process and gets Cloud Run's signals (SIGTERM on a
# cancel; SIGTSTP and SIGCONT around a CPU task's live migration:
# cloud.google.com/run/docs/configuring/task-timeout), and `python3` because that is the
# name Google's Python runtime provides and its buildpacks call (GoogleCloudPlatform/buildpacks
# pkg/python/python.go runs "python3 -m pip"; CPython installs python3, not python).

locals {
  # The one set of job sizing rules, shared with the functions' own check at start
  # (shared/job_sizing.json, read by shared/pools.py): defaults, a GPU type's defaults and
  # minimums, the CPU and memory table, the GPU regions, the project's execution quota.
  job_rules = jsondecode(file("${local.repo_root}/shared/job_sizing.json"))
  # Each pool whose runner is "job" (pools.tf, from the pools file): its `job` object as
  # written (absent: {}), the type of its GPU ("" without one), and its Cloud Run job's
  # sizing, defaulted from the rules (a GPU type's own defaults first).
  job_raw      = { for name, p in local.job_pools : name => try(local.pools_declared[name].job, {}) }
  job_gpu_type = { for name, j in local.job_raw : name => try(j.gpu, null) == null ? "" : try(j.gpu.type, "nvidia-l4") }
  job_specs = {
    for name, j in local.job_raw : name => {
      task_timeout_seconds = try(j.task_timeout_seconds, local.job_rules.gpu[local.job_gpu_type[name]].task_timeout_seconds, local.job_rules.defaults.task_timeout_seconds)
      memory               = try(j.memory, local.job_rules.gpu[local.job_gpu_type[name]].memory, local.job_rules.defaults.memory)
      cpu                  = try(j.cpu, local.job_rules.gpu[local.job_gpu_type[name]].cpu, local.job_rules.defaults.cpu)
      max_executions       = try(j.max_executions, local.job_rules.defaults.max_executions)
      start_grace_seconds  = try(j.start_grace_seconds, local.job_rules.defaults.start_grace_seconds)
      gpu = local.job_gpu_type[name] == "" ? null : {
        type  = local.job_gpu_type[name]
        count = try(j.gpu.count, 1)
      }
    }
  }
  job_field_names = ["task_timeout_seconds", "memory", "cpu", "gpu", "max_executions", "start_grace_seconds"]
  # The `job` object's checks, shared/pools.py's _job (pool_problems lists them): known
  # fields, whole numbers in their bounds, the CPU and memory Cloud Run jobs accept
  # (cloud.google.com/run/docs/configuring/jobs/cpu, .../jobs/memory-limits), a GPU type
  # Cloud Run jobs offer with its minimums, in a region that has it
  # (cloud.google.com/run/docs/configuring/jobs/gpu), and the job pools' executions within
  # the project's 1,000 per region (cloud.google.com/run/quotas).
  job_mib = {
    for name, j in local.job_specs : name => try(
      endswith(j.memory, "Gi") ? tonumber(trimsuffix(j.memory, "Gi")) * 1024 : tonumber(trimsuffix(j.memory, "Mi")), 0
    )
  }
  job_formats_ok = {
    for name, j in local.job_specs : name => try(
      j.memory == tostring(j.memory) && can(regex("^[1-9][0-9]*(Mi|Gi)$", j.memory)) && j.cpu == tostring(j.cpu) && can(regex("^([1-9][0-9]*|0\\.[0-9]{1,3})$", j.cpu)), false
    )
  }
  pool_job_problems = flatten([
    [
      for name, j in local.job_raw : concat(
        can(keys(j)) ? [] : ["pool ${name}: job must be an object"],
        [for k in try(keys(j), []) : "pool ${name}: job: unknown field ${k}" if !contains(local.job_field_names, k)],
        try(j.gpu, null) == null || try(alltrue([for k in keys(j.gpu) : contains(["type", "count"], k)]), false) ? [] : ["pool ${name}: job.gpu must be an object with type and count"],
        local.job_gpu_type[name] == "" || try(contains(keys(local.job_rules.gpu), local.job_gpu_type[name]), false) ? [] : ["pool ${name}: job.gpu.type must be a GPU Cloud Run jobs offer (${join(", ", keys(local.job_rules.gpu))})"],
        try(local.job_specs[name].gpu.count, 1) == 1 ? [] : ["pool ${name}: job.gpu.count must be 1"],
        try(
          local.job_specs[name].task_timeout_seconds == tonumber(local.job_specs[name].task_timeout_seconds) && floor(local.job_specs[name].task_timeout_seconds) == local.job_specs[name].task_timeout_seconds && local.job_specs[name].task_timeout_seconds >= 1 && local.job_specs[name].task_timeout_seconds <= (local.job_gpu_type[name] == "" ? local.job_rules.max_task_timeout_seconds : local.job_rules.max_gpu_task_timeout_seconds), false
        ) ? [] : ["pool ${name}: job.task_timeout_seconds must be a whole number within 1..${local.job_gpu_type[name] == "" ? local.job_rules.max_task_timeout_seconds : local.job_rules.max_gpu_task_timeout_seconds}"],
        local.job_formats_ok[name] ? [] : ["pool ${name}: job.memory must be like \"16Gi\" and job.cpu like \"4\" or \"0.5\""],
        try(
          local.job_specs[name].max_executions == tonumber(local.job_specs[name].max_executions) && floor(local.job_specs[name].max_executions) == local.job_specs[name].max_executions && local.job_specs[name].max_executions >= 1 && local.job_specs[name].max_executions <= local.job_rules.max_executions_per_region, false
        ) ? [] : ["pool ${name}: job.max_executions must be a whole number within 1..${local.job_rules.max_executions_per_region}"],
        try(
          local.job_specs[name].start_grace_seconds == tonumber(local.job_specs[name].start_grace_seconds) && floor(local.job_specs[name].start_grace_seconds) == local.job_specs[name].start_grace_seconds && local.job_specs[name].start_grace_seconds >= 0 && local.job_specs[name].start_grace_seconds <= local.job_rules.max_start_grace_seconds, false
        ) ? [] : ["pool ${name}: job.start_grace_seconds must be a whole number within 0..${local.job_rules.max_start_grace_seconds}"],
        !local.job_formats_ok[name] || try(
          tonumber(local.job_specs[name].cpu) < 1 ? (
            tonumber(local.job_specs[name].cpu) >= local.job_rules.fraction_cpu_min && local.job_mib[name] >= local.job_rules.min_memory_mib && local.job_mib[name] <= (tonumber(local.job_specs[name].cpu) < 0.5 ? local.job_rules.fraction_cpu_max_memory_mib.below_half : local.job_rules.fraction_cpu_max_memory_mib.from_half)
            ) : (
            local.job_mib[name] >= local.job_rules.cpu_memory_mib[local.job_specs[name].cpu][0] && local.job_mib[name] <= local.job_rules.cpu_memory_mib[local.job_specs[name].cpu][1]
          ), false
        ) ? [] : ["pool ${name}: job.cpu ${local.job_specs[name].cpu} with job.memory ${local.job_specs[name].memory} is not a size Cloud Run jobs run (cloud.google.com/run/docs/configuring/jobs/cpu)"],
        local.job_gpu_type[name] == "" || !local.job_formats_ok[name] || try(
          tonumber(local.job_specs[name].cpu) >= local.job_rules.gpu[local.job_gpu_type[name]].min_cpu && local.job_mib[name] >= local.job_rules.gpu[local.job_gpu_type[name]].min_memory_mib, true
        ) ? [] : ["pool ${name}: a ${local.job_gpu_type[name]} GPU needs at least ${local.job_rules.gpu[local.job_gpu_type[name]].min_cpu} CPU and ${floor(local.job_rules.gpu[local.job_gpu_type[name]].min_memory_mib / 1024)} GiB (cloud.google.com/run/docs/configuring/jobs/gpu)"],
        local.job_gpu_type[name] == "" || contains(local.job_rules.gpu_regions, var.region) ? [] : ["pool ${name}: a GPU job runs only in ${join(", ", local.job_rules.gpu_regions)}, not ${var.region} (cloud.google.com/run/docs/configuring/jobs/gpu)"],
      )
    ],
    try(sum(concat([0], [for name, j in local.job_specs : j.max_executions])), 0) <= local.job_rules.max_executions_per_region ? [] : [
      "the job pools' max_executions add up to more than ${local.job_rules.max_executions_per_region}, the running job executions a project has per region (cloud.google.com/run/quotas)"
    ],
  ])

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

    # a whole image (base layers included), patched at each deploy: "Updates and security
    # patches are applied to runtimes only when services are deployed or redeployed"
    # (cloud.google.com/run/docs/configuring/services/automatic-base-image-updates). A deploy
    # comes with every code change (the archive is named by content hash); between them,
    # a new var.task_image_epoch rebuilds the image on the patched base (docs/long-stages.md).
    on_deploy_update_policy {}
    environment_variables = { RECLAIM_TASK_IMAGE_EPOCH = var.task_image_epoch }
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
      # count in the limits, at least 4 CPU and 16 GiB (the shared rules' GPU defaults)
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
        args        = ["--", "python3", "task.py"] # a direct process: see the top of this file
        working_dir = "/workspace"

        resources {
          limits = merge(
            { cpu = each.value.cpu, memory = each.value.memory },
            each.value.gpu == null ? {} : { "nvidia.com/gpu" = tostring(each.value.gpu.count) },
          )
        }

        # The pool claim's own environment (reclaim_env, then the pool's: RECLAIM_POOL, its
        # stale time and the runner variables, pools.tf pool_env), so the task heartbeats
        # by its pool's stale time as its claim does; and the task's own two: the revision
        # of the image it runs (the task-image service's), and its task timeout, which the
        # task ends an attempt before (shared/claim/task.py: a timeout is the stage's
        # failure, not a platform's hand-back). A stage on a task may park on a waitpoint
        # as on claim, so it learns the completion URL too (waitpoints.tf, local.waits_env).
        dynamic "env" {
          for_each = merge(local.reclaim_env, local.pool_env["claim_${each.key}"], local.waits_env, {
            RECLAIM_TASK_REVISION        = basename(data.google_cloud_run_v2_service.task_image[0].latest_ready_revision)
            RECLAIM_TASK_TIMEOUT_SECONDS = tostring(each.value.task_timeout_seconds)
          })
          content {
            name  = env.key
            value = env.value
          }
        }
        # The webhook signing secrets, as claim gets them (functions.tf): claim's account
        # holds secretAccessor on each (iam.tf).
        dynamic "env" {
          for_each = var.webhook_secrets
          content {
            name = "RECLAIM_WEBHOOK_SECRET_${env.key}"
            value_source {
              secret_key_ref {
                secret  = env.value
                version = "latest"
              }
            }
          }
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = each.value.task_timeout_seconds >= 1 && each.value.task_timeout_seconds <= (each.value.gpu == null ? local.job_rules.max_task_timeout_seconds : local.job_rules.max_gpu_task_timeout_seconds)
      error_message = "${each.key}: task_timeout_seconds must be 1..604800 (168 h), or 1..3600 with a GPU (cloud.google.com/run/docs/configuring/task-timeout)."
    }
    precondition {
      condition     = each.value.gpu == null || contains(keys(local.job_rules.gpu), try(each.value.gpu.type, ""))
      error_message = "${each.key}: gpu.type must be nvidia-l4, the GPU Cloud Run jobs offer (cloud.google.com/run/docs/configuring/jobs/gpu)."
    }
    precondition {
      condition     = each.value.gpu == null || try(tonumber(each.value.cpu) >= local.job_rules.gpu[each.value.gpu.type].min_cpu && local.job_mib[each.key] >= local.job_rules.gpu[each.value.gpu.type].min_memory_mib, false)
      error_message = "${each.key}: a GPU job needs at least 4 CPU and 16 GiB (cloud.google.com/run/docs/configuring/jobs/gpu)."
    }
    precondition {
      condition     = each.value.gpu == null || contains(local.job_rules.gpu_regions, var.region)
      error_message = "${each.key}: Cloud Run jobs offer GPUs only in ${join(", ", local.job_rules.gpu_regions)} (cloud.google.com/run/docs/configuring/jobs/gpu)."
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

# A cancel stops the job's execution (shared/features/executions.py, a terminal hook): the
# admin function (the operator routes) and the dashboard cancel, so each may cancel the
# executions of each job: Cloud Run Jobs Executor, "Can execute and cancel Cloud Run jobs"
# (cloud.google.com/iam/docs/roles-permissions/run), without overrides (a bare execution
# has no job to adopt and exits at once).
resource "google_cloud_run_v2_job_iam_member" "cancellers" {
  for_each = {
    for pair in setproduct(keys(local.job_specs), ["admin", "dashboard"]) : "${pair[0]}:${pair[1]}" => pair
  }

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_job.pool[each.value[0]].name
  role     = "roles/run.jobsExecutor"
  member   = "serviceAccount:${each.value[1] == "admin" ? google_service_account.admin.email : google_service_account.fn["dashboard"].email}"
}

# The job grants are made once the jobs exist, then waited for like the others
# (iam.tf, grants_propagate: "typically 2 minutes, potentially 7 minutes or longer",
# cloud.google.com/iam/docs/access-change-propagation) before any function deploys
# (functions.tf depends on this wait), so a pool's claim never dispatches to a job it may
# not run yet, nor to a job that does not exist. Created once: later applies do not wait.
resource "time_sleep" "run_jobs_grants_propagate" {
  count           = length(local.job_specs) > 0 ? 1 : 0
  create_duration = "${var.iam_propagation_seconds}s"

  depends_on = [
    google_cloud_run_v2_job_iam_member.claim_runs,
    google_cloud_run_v2_job_iam_member.sweep_reads,
    google_cloud_run_v2_job_iam_member.cancellers,
  ]
}
