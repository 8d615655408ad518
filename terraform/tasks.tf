# The Cloud Tasks queue. The code creates HTTP tasks for SPARK_TASKS_URL with an OIDC
# token for CLOUD_TASKS_SERVICE_ACCOUNT; the queue enforces the same target, so a task
# can only ever reach the tasks function, as the task invoker.

resource "google_cloud_tasks_queue" "tasks" {
  name     = "${var.name_prefix}-tasks"
  location = var.region
  project  = var.project_id

  rate_limits {
    max_dispatches_per_second = var.queue.max_dispatches_per_second
    max_concurrent_dispatches = var.queue.max_concurrent_dispatches
  }

  # Redeliveries of one task (a 409 while another delivery holds it, a 5xx, no answer).
  # The tools' own retries are new tasks (SPARK_TASK_MAX_ATTEMPTS), with their own backoff.
  retry_config {
    max_attempts       = var.queue.max_attempts
    min_backoff        = "${var.queue.min_backoff_seconds}s"
    max_backoff        = "${var.queue.max_backoff_seconds}s"
    max_doublings      = 5
    max_retry_duration = "${var.queue.max_retry_hours * 3600}s"
  }

  http_target {
    http_method = "POST"
    uri_override {
      scheme                    = "HTTPS"
      host                      = local.tasks_host
      uri_override_enforce_mode = "ALWAYS"
    }
    oidc_token {
      service_account_email = google_service_account.task_invoker.email
      audience              = local.tasks_url
    }
  }

  # Log every failed dispatch, a sample of the rest.
  stackdriver_logging_config {
    sampling_ratio = 0.1
  }

  depends_on = [google_project_service.apis]
}
