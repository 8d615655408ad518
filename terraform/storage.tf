# The uploads bucket for attachments (DESIGN §9): clients upload under {uid}/uploads/
# through resumable upload sessions the api starts for them (README, "Uploading a
# file"), so they need no access of their own. The Firebase link and storage.rules below
# are made only if a storage.rules file is added; there is none.

resource "google_storage_bucket" "uploads" {
  #checkov:skip=CKV_GCP_62:Access to uploads is covered by Cloud Audit Logs; a log bucket would itself need a log bucket.
  name                        = "${var.project_id}-${var.name_prefix}-uploads"
  project                     = var.project_id
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection
  labels                      = local.labels
  versioning {
    enabled = true
  }
  lifecycle_rule {
    condition {
      age = var.uploads_retention_days
    }
    action {
      type = "Delete"
    }
  }
  # Retention (retention.tf): every object here belongs to a conversation (attachments
  # under {uid}/uploads/, spoken replies under {uid}/speech/{conversationId}/), and a
  # lifecycle rule cannot match a prefix after the user's id, so the rule is the
  # bucket's: nothing outlives the conversations the sweep deletes at the same age.
  dynamic "lifecycle_rule" {
    for_each = local.retention_days > 0 ? [local.retention_days] : []
    content {
      condition {
        age = lifecycle_rule.value
      }
      action {
        type = "Delete"
      }
    }
  }
  # An overwritten or deleted upload is kept one day, then gone for good.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 1
    }
    action {
      type = "Delete"
    }
  }
  depends_on = [google_project_service.apis]
}

locals {
  storage_rules = "${local.repo_root}/storage.rules"
  # 1 if storage.rules exists, 0 otherwise (today: uploads use the api's sessions).
  storage_rules_count = fileexists(local.storage_rules) ? 1 : 0
}

resource "google_firebase_storage_bucket" "uploads" {
  provider   = google-beta
  count      = local.storage_rules_count
  project    = var.project_id
  bucket_id  = google_storage_bucket.uploads.name
  depends_on = [google_firebase_project.this]
}

resource "google_firebaserules_ruleset" "storage" {
  count   = local.storage_rules_count
  project = var.project_id
  source {
    files {
      name    = "storage.rules"
      content = file(local.storage_rules)
    }
  }
  depends_on = [google_firebase_storage_bucket.uploads]
  lifecycle {
    create_before_destroy = true
  }
}

resource "google_firebaserules_release" "storage" {
  count        = local.storage_rules_count
  project      = var.project_id
  name         = "firebase.storage/${google_storage_bucket.uploads.name}"
  ruleset_name = "projects/${var.project_id}/rulesets/${google_firebaserules_ruleset.storage[0].name}"
}
