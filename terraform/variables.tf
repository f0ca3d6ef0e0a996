# Inputs, alphabetical. Defaults of `queue` mirror shared/config.py ENV_VARS
# (tests/terraform checks both the names and the defaults).

variable "admin_function" {
  description = "Sizing of admin (the operator routes: cancel, retry, bulk, pause, resume; admin.tf)."
  type = object({
    concurrency     = optional(number, 8)
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    timeout_seconds = optional(number, 60)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 2)
  })
  default = {}
}

variable "alerts" {
  description = "Alert thresholds (terraform/monitoring.tf): how long a due job may wait, the failure ratio over 10 min, how many minutes the sweep may be silent, claim 5xx per 5 min, Cloud Run 5xx and 429 per 5 min."
  type = object({
    oldest_due_job_seconds   = optional(number, 600)
    failure_ratio            = optional(number, 0.2)
    sweep_silent_minutes     = optional(number, 30)
    claim_errors_per_5min    = optional(number, 5)
    platform_errors_per_5min = optional(number, 5)
  })
  default = {}
  validation {
    condition     = var.alerts.oldest_due_job_seconds >= 60 && var.alerts.failure_ratio > 0 && var.alerts.failure_ratio < 1 && var.alerts.claim_errors_per_5min >= 0 && var.alerts.platform_errors_per_5min >= 0
    error_message = "alerts: oldest_due_job_seconds >= 60, 0 < failure_ratio < 1, claim_errors_per_5min >= 0, platform_errors_per_5min >= 0."
  }
  # An absence condition's duration is in whole minutes, at most a day
  # (cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.alertPolicies#metricabsence),
  # and must outlast the log-based metrics' lag: their points can arrive up to 10 minutes
  # late (cloud.google.com/monitoring/api/v3/latency-n-retention), after a 5-minute
  # alignment period: 20 minutes at least, or a late point opens an incident.
  validation {
    condition     = var.alerts.sweep_silent_minutes >= 20 && var.alerts.sweep_silent_minutes <= 1440 && var.alerts.sweep_silent_minutes == floor(var.alerts.sweep_silent_minutes)
    error_message = "alerts.sweep_silent_minutes must be whole minutes from 20 to 1440."
  }
}

variable "claim_function" {
  description = "Sizing of claim. concurrency is also RECLAIM_MAX_CONCURRENT and THREADS; >1 needs cpu >= 1."
  type = object({
    concurrency     = optional(number, 4)
    cpu             = optional(string, "1")
    memory          = optional(string, "1Gi")
    timeout_seconds = optional(number, 1800)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
  })
  default = {}
  validation {
    condition     = var.claim_function.timeout_seconds >= 10 && var.claim_function.timeout_seconds <= 3600
    error_message = "claim_function.timeout_seconds must be 10..3600 (gen2 HTTP functions run at most 60 min)."
  }
}

variable "claim_push" {
  description = "Push subscription reclaim-claim: ack deadline (= HTTP timeout of a push), backoff, dead-letter."
  type = object({
    ack_deadline_seconds  = optional(number, 600)
    minimum_backoff       = optional(string, "10s")
    maximum_backoff       = optional(string, "600s")
    max_delivery_attempts = optional(number, 20)
  })
  default = {}
  validation {
    condition     = var.claim_push.ack_deadline_seconds >= 10 && var.claim_push.ack_deadline_seconds <= 600
    error_message = "claim_push.ack_deadline_seconds must be 10..600."
  }
  validation {
    condition     = var.claim_push.max_delivery_attempts >= 5 && var.claim_push.max_delivery_attempts <= 100
    error_message = "claim_push.max_delivery_attempts must be 5..100."
  }
  # Pub/Sub RetryPolicy: each backoff "should be between 0 and 600 seconds"
  # (cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions#RetryPolicy);
  # a duration is seconds with up to nine decimals and an "s".
  validation {
    condition = alltrue([
      for b in [var.claim_push.minimum_backoff, var.claim_push.maximum_backoff] :
      can(regex("^[0-9]+(\\.[0-9]{1,9})?s$", b)) && try(tonumber(trimsuffix(b, "s")) <= 600, false)
    ])
    error_message = "claim_push.minimum_backoff and maximum_backoff must be durations from \"0s\" to \"600s\", like \"10s\"."
  }
  validation {
    condition     = try(tonumber(trimsuffix(var.claim_push.minimum_backoff, "s")) <= tonumber(trimsuffix(var.claim_push.maximum_backoff, "s")), false)
    error_message = "claim_push.minimum_backoff must not exceed claim_push.maximum_backoff."
  }
}

variable "dashboard_function" {
  description = "Sizing of dashboard (the web UI: a person's browser through `gcloud run services proxy`)."
  type = object({
    concurrency     = optional(number, 8)
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    timeout_seconds = optional(number, 60)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 2)
  })
  default = {}
}

variable "dashboard_viewers" {
  description = "Principals allowed to open the dashboard (run.invoker on it; user:, group:, serviceAccount:, domain:). They can retry and cancel jobs. Never public."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for m in var.dashboard_viewers : can(regex("^(user|group|serviceAccount|domain):[^ ]+$", m))])
    error_message = "dashboard_viewers entries must be user:, group:, serviceAccount: or domain: members (allUsers and allAuthenticatedUsers are refused)."
  }
}

variable "dead_letter_retention" {
  description = "How long reclaim-dead-letter-hold keeps what was dead-lettered (max 31 days)."
  type        = string
  default     = "2678400s"
  validation {
    condition     = can(regex("^[0-9]+s$", var.dead_letter_retention)) && try(tonumber(trimsuffix(var.dead_letter_retention, "s")) >= 600 && tonumber(trimsuffix(var.dead_letter_retention, "s")) <= 2678400, false)
    error_message = "dead_letter_retention must be \"600s\"..\"2678400s\"."
  }
}

variable "force_destroy_buckets" {
  description = "Let `terraform destroy` empty and delete the records and uploads buckets. Off: destroy stops with an error on each one that still holds objects and keeps it (terraform/README.md). Apply a change of this before destroying."
  type        = bool
  default     = false
}

variable "iam_propagation_seconds" {
  description = "How long the first apply waits after the grants it uses at once (builds, notification, pushes). IAM changes \"typically propagate in 2 minutes\"."
  type        = number
  default     = 120
  validation {
    condition     = var.iam_propagation_seconds >= 0 && var.iam_propagation_seconds <= 900 && var.iam_propagation_seconds == floor(var.iam_propagation_seconds)
    error_message = "iam_propagation_seconds must be whole seconds from 0 to 900."
  }
}

variable "iap_audience" {
  description = "Where IAP fronts the services: the audience of its signed header (/projects/<number>/locations/<region>/services/<name>); authors of actions are then read from IAP's verified assertion only (shared/http/identity.py). Empty: from the ID token Cloud Run's IAM check verified."
  type        = string
  default     = ""
  validation {
    condition     = var.iap_audience == "" || can(regex("^/projects/[0-9]+/", var.iap_audience))
    error_message = "iap_audience must be empty or an IAP audience starting /projects/<project number>/."
  }
}

variable "labels" {
  description = "Labels added to every labelled resource."
  type        = map(string)
  default     = {}
}

variable "library_dir" {
  description = "The folder holding the reclaim library the archives carry (shared/, functions/, reclaim/, requirements.txt), relative to the root module or absolute. \"\" = the folder above this module: this repository, or the copy `reclaim tf-module` writes."
  type        = string
  default     = ""
}

variable "log_metrics_ready_seconds" {
  description = "Seconds the alert policies wait after the log-based metrics are created: the Monitoring API answers 404 for a metric up to 10 minutes old (github.com/hashicorp/terraform-provider-google/issues/11102)."
  type        = number
  default     = 600
  validation {
    condition     = var.log_metrics_ready_seconds >= 0 && var.log_metrics_ready_seconds == floor(var.log_metrics_ready_seconds)
    error_message = "log_metrics_ready_seconds must be whole seconds >= 0."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name; the default gives the names the README and local/wiring.py use."
  type        = string
  default     = "reclaim"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{2,14}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix: 4-16 chars, lowercase letters, digits and '-', starting with a letter."
  }
}

variable "noncurrent_retention_days" {
  description = "Days an overwritten or deleted upload (and archive) version stays readable as a noncurrent version (versioning is on in the uploads and sources buckets)."
  type        = number
  default     = 7
  validation {
    condition     = var.noncurrent_retention_days >= 1
    error_message = "noncurrent_retention_days must be >= 1."
  }
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channels every alert policy notifies, as projects/<project>/notificationChannels/<id> (create them in the console or with google_monitoring_notification_channel). Empty: incidents open without notifying anyone."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[^/]+$", c))])
    error_message = "notification_channels entries must be projects/<project>/notificationChannels/<id>."
  }
}

variable "operators" {
  description = "Principals allowed to call the operator routes (run.invoker on the admin function: cancel, retry, bulk retry and cancel, pause and resume; user:, group:, serviceAccount:, domain:). Nobody by default. Never public."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for m in var.operators : can(regex("^(user|group|serviceAccount|domain):[^ ]+$", m))])
    error_message = "operators entries must be user:, group:, serviceAccount: or domain: members (allUsers and allAuthenticatedUsers are refused)."
  }
}

variable "pipeline_modules" {
  description = "Python modules imported at start so their pipelines register (e.g. pipelines.csv_summary); sets RECLAIM_PIPELINE_MODULES. Each must be in pipelines_dir's package or in shared."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for m in var.pipeline_modules : can(regex("^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$", m))])
    error_message = "pipeline_modules entries must be dotted Python module names."
  }
}

variable "pipelines_dir" {
  description = "Folder of your pipeline package, shipped in every function archive under its own name (relative to the root module, or absolute). \"\" = pipelines/ beside the library (this repository's)."
  type        = string
  default     = ""
  validation {
    condition     = var.pipelines_dir == "" || can(regex("^[A-Za-z_][A-Za-z0-9_]*$", basename(trimsuffix(var.pipelines_dir, "/"))))
    error_message = "pipelines_dir must name a folder whose name is a Python package name (letters, digits, _)."
  }
  validation {
    condition     = !contains(["shared", "main", "reclaim"], basename(trimsuffix(var.pipelines_dir, "/")))
    error_message = "pipelines_dir must not be named shared, main or reclaim: the archive already has those."
  }
}

variable "pools_file" {
  description = "The worker pools file (docs/pools.md), inside the pipelines package (relative to terraform/ or absolute). \"\" = pools.json of the pipelines package; no file: one claim for every pipeline."
  type        = string
  default     = ""
}

variable "project_id" {
  description = "The GCP project to deploy into."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a GCP project id (6-30 chars, lowercase, digits, '-')."
  }
}

variable "queue" {
  description = "Queue tuning, passed to every function as RECLAIM_* (see shared/config.py for meanings)."
  type = object({
    stale_seconds              = optional(number, 120)
    rollout_skew_seconds       = optional(number, 900)
    max_attempts               = optional(number, 3)
    backoff_base_seconds       = optional(number, 5)
    backoff_max_seconds        = optional(number, 300)
    retry_wait_seconds         = optional(number, 90)
    clock_skew_seconds         = optional(number, 300)
    min_write_interval_seconds = optional(number, 1.0)
    sweep_max_jobs             = optional(number, 1000)
    sweep_max_seconds          = optional(number, 45)
    drain_max_jobs             = optional(number, 3)
    drain_job_seconds          = optional(number, 60)
    max_body_bytes             = optional(number, 1048576)
    max_batch_jobs             = optional(number, 1000)
    log_level                  = optional(string, "INFO")
  })
  default = {}
  validation {
    condition     = var.queue.stale_seconds >= 3 && var.queue.rollout_skew_seconds >= 0 && var.queue.max_attempts >= 1 && var.queue.sweep_max_jobs >= 1 && var.queue.max_body_bytes >= 1 && var.queue.max_batch_jobs >= 1 && var.queue.drain_max_jobs >= 0 && var.queue.drain_job_seconds >= 0
    error_message = "queue: stale_seconds >= 3, rollout_skew_seconds >= 0, max_attempts/sweep_max_jobs/max_body_bytes/max_batch_jobs >= 1, drain_max_jobs >= 0, drain_job_seconds >= 0."
  }
  validation {
    condition     = var.queue.backoff_base_seconds >= 0 && var.queue.backoff_max_seconds >= var.queue.backoff_base_seconds && var.queue.retry_wait_seconds >= 0
    error_message = "queue: 0 <= backoff_base_seconds <= backoff_max_seconds, retry_wait_seconds >= 0."
  }
  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR"], var.queue.log_level)
    error_message = "queue.log_level must be DEBUG, INFO, WARNING or ERROR."
  }
}

variable "record_shards" {
  description = "Record buckets the jobs are spread over by a hash of the job id (docs/capacity.md, section Sharding): each bucket starts at about 1,000 object writes/s, so more buckets carry more jobs/s from cold. 1 = the records bucket alone (no other resource). Choose it when you create the deployment: a job is looked for only in the bucket its id hashes to."
  type        = number
  default     = 1
  validation {
    condition     = var.record_shards >= 1 && var.record_shards <= 64 && var.record_shards == floor(var.record_shards)
    error_message = "record_shards must be a whole number from 1 to 64."
  }
}

variable "legacy_record_names" {
  description = "Whether records are also looked for under their names from before the hash segment (jobs/<id>.json; docs/capacity.md, section Names that spread load): one more read per submitted user-chosen id. Set false once no such record is left: every job submitted before the upgrade has ended and its record has expired (the retention_days of its state after it ended; a job still queued or running keeps its record), which `gcloud storage ls 'gs://<records>/jobs/*.json'` shows as nothing listed. A new deployment can set false from the start."
  type        = bool
  default     = true
}

variable "reclaim_version" {
  description = "The reclaim version you pin (e.g. \"0.9.0\"): the plan fails when the library this module archives is another, so an upgrade is a change you make on purpose. \"\" = any."
  type        = string
  default     = ""
  validation {
    condition     = var.reclaim_version == "" || can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+([.a-z0-9+-]*)$", var.reclaim_version))
    error_message = "reclaim_version must be a version such as 0.9.0 (or \"\" for any)."
  }
}

variable "region" {
  description = "Region of the functions, the scheduler job and the buckets."
  type        = string
  default     = "us-central1"
  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]$", var.region))
    error_message = "region must be a GCP region such as us-central1."
  }
}

variable "retention_days" {
  description = "Days finished work is kept, per terminal state (terraform/README.md, section Retention of finished jobs: record expiry via custom time)."
  type = object({
    done      = optional(number, 30)
    failed    = optional(number, 90)
    cancelled = optional(number, 30)
  })
  default = {}
  validation {
    condition     = alltrue([for d in values(var.retention_days) : d >= 1 && d == floor(d)])
    error_message = "retention_days values must be whole days >= 1."
  }
}

variable "schedules_file" {
  description = "Your cron schedules (docs/time.md), relative to the root module or absolute; shipped in the archives as <package>/schedules.json. \"\" = schedules.json in pipelines_dir (none: no schedules)."
  type        = string
  default     = ""
  validation {
    condition     = var.schedules_file == "" || endswith(var.schedules_file, ".json")
    error_message = "schedules_file must name a .json file."
  }
}

variable "soft_delete_days" {
  description = "Cloud Storage soft delete: days a deleted or overwritten object stays restorable (and billed). 0 turns it off; else 7..90."
  type = object({
    records = optional(number, 7)
    uploads = optional(number, 0)
  })
  default = {}
  validation {
    condition     = alltrue([for d in values(var.soft_delete_days) : d == 0 || (d >= 7 && d <= 90 && d == floor(d))])
    error_message = "soft_delete_days values must be 0 or whole days from 7 to 90 (cloud.google.com/storage/docs/soft-delete)."
  }
}

variable "submit_function" {
  description = "Sizing of submit (HTTP POST /jobs, GET /jobs/<id>). The defaults fit a batch of queue.max_batch_jobs = 1000 (terraform/README.md, \"Sizing submit\")."
  type = object({
    concurrency     = optional(number, 8)
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    timeout_seconds = optional(number, 180)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
  })
  default = {}
  validation {
    condition     = var.submit_function.timeout_seconds >= 10 && var.submit_function.timeout_seconds <= 3600
    error_message = "submit_function.timeout_seconds must be 10..3600 (gen2 HTTP functions run at most 60 min)."
  }
}

variable "submit_invokers" {
  description = "Principals allowed to call submit (user:, group:, serviceAccount:, domain:). Never public."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for m in var.submit_invokers : can(regex("^(user|group|serviceAccount|domain):[^ ]+$", m))])
    error_message = "submit_invokers entries must be user:, group:, serviceAccount: or domain: members (allUsers and allAuthenticatedUsers are refused)."
  }
}

variable "submit_upload_function" {
  description = "Sizing of submit_upload (push target of reclaim-submit-upload)."
  type = object({
    concurrency     = optional(number, 16)
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    timeout_seconds = optional(number, 60)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 10)
  })
  default = {}
}

variable "submit_upload_push" {
  description = "Push subscription reclaim-submit-upload: ack deadline, backoff, dead-letter."
  type = object({
    ack_deadline_seconds  = optional(number, 60)
    minimum_backoff       = optional(string, "10s")
    maximum_backoff       = optional(string, "600s")
    max_delivery_attempts = optional(number, 20)
  })
  default = {}
  validation {
    condition     = var.submit_upload_push.ack_deadline_seconds >= 10 && var.submit_upload_push.ack_deadline_seconds <= 600
    error_message = "submit_upload_push.ack_deadline_seconds must be 10..600."
  }
  validation {
    condition     = var.submit_upload_push.max_delivery_attempts >= 5 && var.submit_upload_push.max_delivery_attempts <= 100
    error_message = "submit_upload_push.max_delivery_attempts must be 5..100."
  }
  # Pub/Sub RetryPolicy: each backoff "should be between 0 and 600 seconds"
  # (cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions#RetryPolicy);
  # a duration is seconds with up to nine decimals and an "s".
  validation {
    condition = alltrue([
      for b in [var.submit_upload_push.minimum_backoff, var.submit_upload_push.maximum_backoff] :
      can(regex("^[0-9]+(\\.[0-9]{1,9})?s$", b)) && try(tonumber(trimsuffix(b, "s")) <= 600, false)
    ])
    error_message = "submit_upload_push.minimum_backoff and maximum_backoff must be durations from \"0s\" to \"600s\", like \"10s\"."
  }
  validation {
    condition     = try(tonumber(trimsuffix(var.submit_upload_push.minimum_backoff, "s")) <= tonumber(trimsuffix(var.submit_upload_push.maximum_backoff, "s")), false)
    error_message = "submit_upload_push.minimum_backoff must not exceed submit_upload_push.maximum_backoff."
  }
}

variable "sweep_function" {
  description = "Sizing of sweep (Cloud Scheduler POST). timeout_seconds is also the scheduler attempt deadline."
  type = object({
    concurrency     = optional(number, 1)
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    timeout_seconds = optional(number, 120)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 2)
  })
  default = {}
  validation {
    condition     = var.sweep_function.timeout_seconds >= 15 && var.sweep_function.timeout_seconds <= 1800
    error_message = "sweep_function.timeout_seconds must be 15..1800 (Cloud Scheduler HTTP attempt deadline range)."
  }
}

variable "sweep_schedule" {
  description = "Cron schedule of the sweep (requeues jobs whose owner went silent)."
  type        = string
  default     = "* * * * *"
  validation {
    condition     = length(split(" ", trimspace(var.sweep_schedule))) == 5
    error_message = "sweep_schedule must be a 5-field cron expression."
  }
}

variable "sweep_time_zone" {
  description = "Time zone of sweep_schedule (tz database name)."
  type        = string
  default     = "Etc/UTC"
}

variable "task_image_epoch" {
  description = "Change it (a date, say) to rebuild the image the Cloud Run jobs run on today's patched base and Python, without a code change: the job image is patched only when it is deployed (docs/long-stages.md)."
  type        = string
  default     = ""
}

variable "upload_bucket_projects" {
  description = "For each routed upload bucket (uploads.json \"buckets\") that lives in another project: that project's id. Its Cloud Storage service agent, which publishes the bucket's notifications, gets publisher on the uploads topic (uploads.tf)."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for b, p in var.upload_bucket_projects : can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", p))])
    error_message = "upload_bucket_projects values must be project ids (6-30 lowercase letters, digits and hyphens)."
  }
}

variable "uploads_file" {
  description = "Your upload routes (docs/pipelines.md, \"Uploads\"), relative to the root module or absolute; shipped in the archives as <package>/uploads.json. \"\" = uploads.json in pipelines_dir (none: every upload becomes an upload-digest job)."
  type        = string
  default     = ""
  validation {
    condition     = var.uploads_file == "" || endswith(var.uploads_file, ".json")
    error_message = "uploads_file must name a .json file."
  }
}

variable "uploads_prefix" {
  description = "Uploads no route takes become upload-digest jobs only under this prefix (\"\" = all); the routes of uploads.json have their own prefixes (docs/pipelines.md, \"Uploads\")."
  type        = string
  default     = ""
}

variable "webhook_secrets" {
  description = "Webhook signing secrets: NAME => the id of an existing Secret Manager secret, exposed to claim only as RECLAIM_WEBHOOK_SECRET_<NAME> (docs/workflows.md, terraform/README.md)."
  type        = map(string)
  default     = {}
  validation {
    condition = alltrue([
      for k, v in var.webhook_secrets : can(regex("^[A-Z0-9_]{1,64}$", k)) && can(regex("^[A-Za-z0-9_-]{1,255}$", v))
    ])
    error_message = "webhook_secrets: keys are NAME in RECLAIM_WEBHOOK_SECRET_<NAME> (A-Z, 0-9, _; up to 64), values are Secret Manager secret ids (letters, digits, - and _)."
  }
}

variable "waitpoints_function" {
  description = "Sizing of waitpoints (POST /waitpoints/<token>: waitpoint completions; waitpoints.tf)."
  type = object({
    concurrency     = optional(number, 8)
    cpu             = optional(string, "1")
    memory          = optional(string, "512Mi")
    timeout_seconds = optional(number, 60)
    min_instances   = optional(number, 0)
    max_instances   = optional(number, 2)
  })
  default = {}
}

variable "waitpoint_invokers" {
  description = "Who may call the waitpoint completion route (run.invoker on the waitpoints function). allUsers by default: providers outside the project call it, and the signed token in the URL is their proof (docs/waiting.md). Name principals (user:, group:, serviceAccount:, domain:) to admit only those."
  type        = list(string)
  default     = ["allUsers"]
  validation {
    condition     = alltrue([for m in var.waitpoint_invokers : can(regex("^(allUsers|(user|group|serviceAccount|domain):[^ ]+)$", m))])
    error_message = "waitpoint_invokers entries must be allUsers or user:, group:, serviceAccount:, domain: members (allAuthenticatedUsers is refused)."
  }
}
