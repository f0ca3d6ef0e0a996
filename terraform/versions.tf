# Bounded provider versions. The offline schema check reads hashicorp/google and
# hashicorp/google-beta 6.50.0 and hashicorp/time 0.13.1 (tests/terraform/*_schema.json),
# so each range starts at the checked version and stops before the next major.
# This is a module: it configures no provider. Its caller (deploy/ in this repository,
# deploy/ of a `reclaim init` project) declares `provider "google"` and
# `provider "google-beta"` with the project and region, and the module inherits them
# (developer.hashicorp.com/terraform/language/modules/develop/providers).
terraform {
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.50.0, < 7.0.0"
    }
    # Only for google_project_service_identity, which 6.x ships in google-beta alone
    # (registry.terraform.io/providers/hashicorp/google/6.50.0/docs/resources/project_service_identity).
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 6.50.0, < 7.0.0"
    }
    # time_sleep: the propagation waits (main.tf, iam.tf).
    time = {
      source  = "hashicorp/time"
      version = ">= 0.13.1, < 1.0.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4.2, < 3.0.0"
    }
  }
}
