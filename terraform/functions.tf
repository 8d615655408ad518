# The two gen2 functions, built from the archive `make package` makes. The object is
# named by its sha256, so the same commit deploys nothing new and any change redeploys.

resource "google_storage_bucket" "source" {
  #checkov:skip=CKV_GCP_62:Access to build sources is covered by Cloud Audit Logs; a log bucket would itself need a log bucket.
  name                        = "${var.project_id}-${var.name_prefix}-source"
  project                     = var.project_id
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true
  labels                      = local.labels
  versioning {
    enabled = true
  }
  lifecycle_rule {
    condition {
      age = 90
    }
    action {
      type = "Delete"
    }
  }
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 7
    }
    action {
      type = "Delete"
    }
  }
  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket_object" "source" {
  name   = "functions-${local.source_bytes}.zip"
  bucket = google_storage_bucket.source.name
  source = var.source_archive
}

locals {
  functions = {
    api = {
      name        = local.api_name
      description = "Spark AI Agent: the public HTTP API (Firebase ID tokens checked in code)."
      account     = google_service_account.api.email
      scaling     = var.api_scaling
      # Long-lived SSE streams: the longest an HTTP function may run.
      timeout = 3600
      # Browsers call it directly.
      ingress = "ALLOW_ALL"
    }
    tasks = {
      name        = local.tasks_name
      description = "Spark AI Agent: Cloud Tasks calls only (tools, replies, watchdogs)."
      account     = google_service_account.tasks.email
      scaling     = var.tasks_scaling
      # Cloud Tasks waits 10 minutes for an HTTP task by default.
      timeout = 600
      # Cloud Tasks in the same project is internal traffic; nothing else reaches it.
      ingress = "ALLOW_INTERNAL_ONLY"
    }
  }
}

resource "google_cloudfunctions2_function" "api" {
  #checkov:skip=CKV_GCP_124:Ingress from everywhere is the point: browsers call the api directly, and every route verifies a Firebase ID token in code.
  name        = local.functions.api.name
  location    = var.region
  project     = var.project_id
  description = local.functions.api.description
  labels      = local.labels

  build_config {
    runtime         = var.python_runtime
    entry_point     = "api"
    service_account = google_service_account.build.id
    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    service_account_email            = local.functions.api.account
    ingress_settings                 = local.functions.api.ingress
    all_traffic_on_latest_revision   = true
    min_instance_count               = 0
    max_instance_count               = local.functions.api.scaling.max_instances
    max_instance_request_concurrency = local.functions.api.scaling.concurrency
    available_memory                 = local.functions.api.scaling.memory
    available_cpu                    = "1"
    timeout_seconds                  = local.functions.api.timeout
    environment_variables            = local.env

    dynamic "secret_environment_variables" {
      for_each = local.model_keys
      content {
        key        = secret_environment_variables.value
        project_id = var.project_id
        secret     = google_secret_manager_secret.model_key[secret_environment_variables.value].secret_id
        version    = "latest"
      }
    }
  }

  depends_on = [
    google_project_iam_member.build,
    google_storage_bucket_iam_member.build_source,
    google_secret_manager_secret_iam_member.model_key,
  ]
}

resource "google_cloudfunctions2_function" "tasks" {
  name        = local.functions.tasks.name
  location    = var.region
  project     = var.project_id
  description = local.functions.tasks.description
  labels      = local.labels

  build_config {
    runtime         = var.python_runtime
    entry_point     = "tasks"
    service_account = google_service_account.build.id
    source {
      storage_source {
        bucket = google_storage_bucket.source.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    service_account_email            = local.functions.tasks.account
    ingress_settings                 = local.functions.tasks.ingress
    all_traffic_on_latest_revision   = true
    min_instance_count               = 0
    max_instance_count               = local.functions.tasks.scaling.max_instances
    max_instance_request_concurrency = local.functions.tasks.scaling.concurrency
    available_memory                 = local.functions.tasks.scaling.memory
    available_cpu                    = "1"
    timeout_seconds                  = local.functions.tasks.timeout
    environment_variables            = local.env

    dynamic "secret_environment_variables" {
      for_each = local.model_keys
      content {
        key        = secret_environment_variables.value
        project_id = var.project_id
        secret     = google_secret_manager_secret.model_key[secret_environment_variables.value].secret_id
        version    = "latest"
      }
    }
  }

  depends_on = [
    google_project_iam_member.build,
    google_storage_bucket_iam_member.build_source,
    google_secret_manager_secret_iam_member.model_key,
  ]
}
