# What differs per environment (terraform.tfvars); each is passed to the module's
# variable of the same name, whose validations apply (../terraform/variables.tf).

variable "dashboard_viewers" {
  description = "Who may open the web dashboard (user:, group:, serviceAccount:, domain:); never allUsers."
  type        = list(string)
  default     = []
}

variable "operators" {
  description = "Who may call the operator routes on the admin function (cancel, retry, bulk, pause, resume): user:, group:, serviceAccount:, domain:; never allUsers."
  type        = list(string)
  default     = []
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channels every alert notifies (projects/<p>/notificationChannels/<id>)."
  type        = list(string)
  default     = []
}

variable "pipeline_modules" {
  description = "Your pipeline modules, imported at start (RECLAIM_PIPELINE_MODULES)."
  type        = list(string)
  default     = ["pipelines.csv_summary"]
}

variable "project_id" {
  description = "The GCP project to deploy into."
  type        = string
}

variable "region" {
  description = "Region of the functions, buckets and scheduler jobs."
  type        = string
  default     = "us-central1"
}

variable "submit_invokers" {
  description = "Who may call submit (user:, group:, serviceAccount:, domain:); never allUsers."
  type        = list(string)
  default     = []
}

variable "webhook_secrets" {
  description = "Webhook signing secrets: NAME => an existing Secret Manager secret (RECLAIM_WEBHOOK_SECRET_<NAME> on claim)."
  type        = map(string)
  default     = {}
}
