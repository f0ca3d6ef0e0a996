# The providers, configured here and inherited by the module: a module declares the
# providers it needs and their bounds (../terraform/versions.tf), its caller configures
# them. The bounds are the module's (a test keeps them equal).
terraform {
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.50.0, < 7.0.0"
    }
    google-beta = {
      source  = "hashicorp/google-beta"
      version = ">= 6.50.0, < 7.0.0"
    }
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

provider "google" {
  project = var.project_id
  region  = var.region
}

provider "google-beta" {
  project = var.project_id
  region  = var.region
}
