# One service account per role, each with only what it needs:
#   api           runs the api function
#   tasks         runs the tasks function
#   task-invoker  the identity of Cloud Tasks' calls (OIDC); may only invoke `tasks`
#   build         builds the functions' images from the source archive

resource "google_service_account" "api" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-api"
  display_name = "Spark AI Agent: api function"
  depends_on   = [google_project_service.apis]
}

resource "google_service_account" "tasks" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-tasks"
  display_name = "Spark AI Agent: tasks function"
  depends_on   = [google_project_service.apis]
}

resource "google_service_account" "task_invoker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-task-invoker"
  display_name = "Spark AI Agent: Cloud Tasks calls to the tasks function"
  depends_on   = [google_project_service.apis]
}

resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-build"
  display_name = "Spark AI Agent: builds of the functions"
  depends_on   = [google_project_service.apis]
}

locals {
  runtime_members = {
    api   = "serviceAccount:${google_service_account.api.email}"
    tasks = "serviceAccount:${google_service_account.tasks.email}"
  }
}

# Both functions read and write Firestore (conversations, ledgers, lessons).
resource "google_project_iam_member" "firestore" {
  for_each = local.runtime_members
  project  = var.project_id
  role     = "roles/datastore.user"
  member   = each.value
}

# Both functions export their spans to Cloud Trace and their metrics to Cloud Monitoring
# (SPARK_TELEMETRY=gcp, shared/observe/setup.py).
resource "google_project_iam_member" "observability" {
  for_each = {
    for pair in setproduct(keys(local.runtime_members), ["roles/cloudtrace.agent", "roles/monitoring.metricWriter"]) :
    "${pair[0]}:${pair[1]}" => { member = local.runtime_members[pair[0]], role = pair[1] }
  }
  project = var.project_id
  role    = each.value.role
  member  = each.value.member
}

# Only when asked to check revocation: reading a user's record in Firebase Auth.
resource "google_project_iam_member" "auth_viewer" {
  for_each = var.check_revoked ? local.runtime_members : {}
  project  = var.project_id
  role     = "roles/firebaseauth.viewer"
  member   = each.value
}

# Both functions enqueue tasks (replies, tool calls, watchdogs, follow-ups)...
resource "google_cloud_tasks_queue_iam_member" "enqueuer" {
  for_each = local.runtime_members
  project  = var.project_id
  location = google_cloud_tasks_queue.tasks.location
  name     = google_cloud_tasks_queue.tasks.name
  role     = "roles/cloudtasks.enqueuer"
  member   = each.value
}

# ...whose OIDC tokens are the task invoker's: creating such a task needs actAs on it.
resource "google_service_account_iam_member" "act_as_invoker" {
  for_each           = local.runtime_members
  service_account_id = google_service_account.task_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = each.value
}

# The task invoker may call the tasks function, and nothing else.
resource "google_cloud_run_service_iam_member" "tasks_invoker" {
  project  = var.project_id
  location = google_cloudfunctions2_function.tasks.location
  service  = google_cloudfunctions2_function.tasks.name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.task_invoker.email}"
}

# The api is public at the HTTP level: every route checks a Firebase ID token itself
# (browsers call it directly, and cannot hold Google credentials).
resource "google_cloud_run_service_iam_member" "api_public" {
  #checkov:skip=CKV_GCP_102:The api is a public API for browsers; every route verifies a Firebase ID token in code (DESIGN §4, §10).
  project  = var.project_id
  location = google_cloudfunctions2_function.api.location
  service  = google_cloudfunctions2_function.api.name
  role     = "roles/run.invoker"
  member   = "allUsers"
}

# The build account: write the image, write build logs, read the source archive.
resource "google_project_iam_member" "build" {
  for_each = toset(["roles/artifactregistry.writer", "roles/logging.logWriter"])
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.build.email}"
}

resource "google_storage_bucket_iam_member" "build_source" {
  bucket = google_storage_bucket.source.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.build.email}"
}

# The api starts the upload sessions clients upload through (object create), reads the
# files a message attaches and writes their normalised copies (the JPEG, the PDF's
# text) beside them: object read and write on the uploads bucket only.
resource "google_storage_bucket_iam_member" "api_uploads" {
  bucket = google_storage_bucket.uploads.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.api.email}"
}
