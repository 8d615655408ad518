output "api_url" {
  description = "The api function's URL; the API is under /api/spark/agent/ (GET /healthz answers {\"status\": \"ok\"})."
  value       = google_cloudfunctions2_function.api.service_config[0].uri
}

output "tasks_url" {
  description = "The tasks function's URL (the task target and OIDC audience; private)."
  value       = local.tasks_url
}

output "task_queue" {
  description = "The Cloud Tasks queue."
  value       = google_cloud_tasks_queue.tasks.id
}

output "model_key_secrets" {
  description = "The Secret Manager secret of each model key: add a version to each (README: Deploy)."
  value       = { for key, secret in google_secret_manager_secret.model_key : key => secret.secret_id }
}

output "uploads_bucket" {
  description = "The attachments bucket."
  value       = google_storage_bucket.uploads.name
}

output "service_accounts" {
  description = "The service account of each role."
  value = {
    api          = google_service_account.api.email
    tasks        = google_service_account.tasks.email
    task_invoker = google_service_account.task_invoker.email
    build        = google_service_account.build.email
  }
}
