# Terraform and provider versions.
#
# `terraform providers lock` needs the registry, which this project's machines cannot
# reach, so there is no .terraform.lock.hcl: the providers are pinned to exact versions
# here instead. Run `terraform init` once on a machine that can reach the registry and
# commit the lock file it writes, to pin their checksums as well.
terraform {
  # Optional object attributes with defaults, and endswith(), are used below.
  required_version = ">= 1.3.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "= 6.48.0"
    }
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "= 6.48.0"
    }
  }

  # Remote state (recommended for anything but a trial): a versioned bucket made once by
  # hand, e.g. `gcloud storage buckets create gs://PROJECT-tfstate --location=europe-west2
  # --uniform-bucket-level-access --public-access-prevention` then
  # `gcloud storage buckets update gs://PROJECT-tfstate --versioning`. Uncomment, set the
  # bucket and run `terraform init -migrate-state`.
  #
  # backend "gcs" {
  #   bucket = "PROJECT-tfstate"
  #   prefix = "spark-agent"
  # }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

# The Firebase resources (the project, the Storage link) live in google-beta. Firebase
# APIs bill the quota project, so user credentials need the override.
provider "google-beta" {
  project               = var.project_id
  region                = var.region
  user_project_override = true
  billing_project       = var.project_id
}

data "google_project" "this" {
  project_id = var.project_id
}
