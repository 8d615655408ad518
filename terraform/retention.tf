# Retention (DESIGN §15): with limits.SPARK_RETENTION_DAYS set, conversations untouched
# that many days are deleted by a daily sweep. Cloud Scheduler calls the tasks function
# once a day, as Cloud Tasks does: a POST with an OIDC token for the task invoker (the
# one identity the function accepts, CLOUD_TASKS_SERVICE_ACCOUNT) and the audience it
# checks. The function deletes one page and queues the rest on the tasks queue.
# Off (0, the default): no job, and no lifecycle rule on the uploads bucket.

locals {
  retention_days = lookup(var.limits, "SPARK_RETENTION_DAYS", 0)
  retention      = local.retention_days > 0 ? 1 : 0
}

resource "google_cloud_scheduler_job" "retention" {
  count       = local.retention
  project     = var.project_id
  region      = var.region
  name        = "${var.name_prefix}-retention"
  description = "Spark AI Agent: delete conversations untouched for ${local.retention_days} days."
  # Daily, at a quiet hour; a missed or failed run is retried below, and the next
  # day's sweep finds whatever one left.
  schedule         = "17 3 * * *"
  time_zone        = "Etc/UTC"
  attempt_deadline = "600s"

  retry_config {
    retry_count          = 3
    min_backoff_duration = "60s"
    max_backoff_duration = "600s"
  }

  http_target {
    http_method = "POST"
    uri         = "${local.tasks_url}/"
    headers = {
      "Content-Type" = "application/json"
    }
    body = base64encode(jsonencode({ kind = "retention" }))
    oidc_token {
      service_account_email = google_service_account.task_invoker.email
      audience              = local.tasks_url
    }
  }

  depends_on = [google_project_service.apis]
}
