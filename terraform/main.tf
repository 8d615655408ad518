# What the two functions are told (shared/config.py reads every variable; tests derive the
# list from it and check each is set here, or deliberately left out). Adding a setting is
# one line: wiring here, or a limit in var.limits.

locals {
  api_name     = "${var.name_prefix}-api"
  tasks_name   = "${var.name_prefix}-tasks"
  labels       = merge(var.labels, { managed-by = "terraform" })
  repo_root    = "${path.module}/.."
  source_bytes = filesha256(var.source_archive)

  # The tasks function's deterministic Cloud Run URL (SERVICE-PROJECT_NUMBER.REGION.run.app),
  # known before the function exists: the function needs its own URL (it is the audience
  # it checks on every task call) and cannot read its own attributes. Cloud Run accepts
  # ID tokens whose audience is any of its run.app URLs.
  tasks_host = "${local.tasks_name}-${data.google_project.this.number}.${var.region}.run.app"
  tasks_url  = "https://${local.tasks_host}"

  # The model providers' keys, each a Secret Manager secret mounted into both functions.
  model_keys = toset(["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"])

  env = merge(
    {
      GOOGLE_CLOUD_PROJECT        = var.project_id
      SPARK_MODEL                 = var.model
      SPARK_TRANSCRIBE_MODEL      = var.transcribe_model
      OPENAI_BASE_URL             = var.openai_base_url
      ANTHROPIC_BASE_URL          = var.anthropic_base_url
      GEMINI_BASE_URL             = var.gemini_base_url
      SPARK_CHECK_REVOKED         = tostring(var.check_revoked)
      CLOUD_TASKS_QUEUE           = google_cloud_tasks_queue.tasks.name
      CLOUD_TASKS_LOCATION        = google_cloud_tasks_queue.tasks.location
      SPARK_TASKS_URL             = local.tasks_url
      CLOUD_TASKS_SERVICE_ACCOUNT = google_service_account.task_invoker.email
      SPARK_UPLOADS_BUCKET        = google_storage_bucket.uploads.name
      SPARK_APP_URL               = var.app_url != "" ? var.app_url : "https://${var.project_id}.web.app"
      SPARK_LIVE_MODEL            = var.live_model
      SPARK_SPEECH_MODEL          = var.speech_model
      SPARK_SPEECH_VOICE          = var.speech_voice
      SPARK_TELEMETRY             = "gcp"
      SPARK_OFFLINE_VOICE         = "false" # the local speech model is a make dev tool, never deployed
      SPARK_APP_CHECK             = var.app_check
      SPARK_MODERATION            = var.moderation
      SPARK_MODERATION_FAIL       = var.moderation_fail
      SPARK_HELPLINE              = var.helpline
      SPARK_PROJECT_NUMBER        = data.google_project.this.number
    },
    { for name, value in var.limits : name => tostring(value) },
  )
}

resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtasks.googleapis.com",
    "cloudtrace.googleapis.com",
    "firebase.googleapis.com",
    "firebaserules.googleapis.com",
    "firebasestorage.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "identitytoolkit.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ])
  project = var.project_id
  service = each.value
  # Turning an API off on destroy would break anything else in the project that uses it.
  disable_on_destroy = false
}

# Firebase on the project: Firebase Auth (the ID tokens the api verifies) and security rules.
resource "google_firebase_project" "this" {
  provider   = google-beta
  project    = var.project_id
  depends_on = [google_project_service.apis]
}
