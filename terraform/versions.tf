# Bounded provider versions: the offline schema check reads hashicorp/google 6.50.0
# (tests/terraform/google_provider_schema.json), so 6.x from 6.50 on is what is checked.
terraform {
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.50.0, < 7.0.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4.0, < 3.0.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}
