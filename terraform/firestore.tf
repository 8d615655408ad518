# Firestore (native mode), its client rules, and the indexes the code needs.

resource "google_firestore_database" "default" {
  project                           = var.project_id
  name                              = "(default)"
  location_id                       = var.firestore_location
  type                              = "FIRESTORE_NATIVE"
  concurrency_mode                  = "OPTIMISTIC"
  app_engine_integration_mode       = "DISABLED"
  point_in_time_recovery_enablement = "POINT_IN_TIME_RECOVERY_ENABLED"
  delete_protection_state           = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy                   = var.deletion_protection ? "ABANDON" : "DELETE"
  depends_on                        = [google_project_service.apis]
}

# The rules `make test` runs against the emulator (tools/stack.py), released as they are.
resource "google_firebaserules_ruleset" "firestore" {
  project = var.project_id
  source {
    files {
      name    = "firestore.rules"
      content = file("${local.repo_root}/firestore.rules")
    }
  }
  depends_on = [google_firestore_database.default, google_firebase_project.this]
  lifecycle {
    # The release points at the ruleset; a ruleset in use cannot be deleted.
    create_before_destroy = true
  }
}

resource "google_firebaserules_release" "firestore" {
  project      = var.project_id
  name         = "cloud.firestore"
  ruleset_name = "projects/${var.project_id}/rulesets/${google_firebaserules_ruleset.firestore.name}"
}

# Composite indexes: one, below (a conversation's task sections). The code's other queries page archive segments by one field
# (`segment`) and list a lesson's kept versions by one field (`version`), which Firestore's
# automatic single-field indexes serve; a test scans the code's queries and fails if one
# ever needs a composite index that is not declared here.
#
# Single-field exemptions instead: these fields are large (whole messages, lesson bodies)
# and never queried, so indexing them would only slow every write and fill the index.
# A conversation's task sections, newest first (``FirestoreTaskDocumentStore.recent``, and
# clients rendering a conversation's sections): an equality on one field and an order on
# another need a composite index. Listing all of a user's sections orders by `createdAt`
# alone (a single-field index).
resource "google_firestore_index" "tasks_by_conversation" {
  project    = var.project_id
  database   = google_firestore_database.default.name
  collection = "tasks"
  fields {
    field_path = "conversationId"
    order      = "ASCENDING"
  }
  fields {
    field_path = "createdAt"
    order      = "DESCENDING"
  }
}

# The retention sweep's query (``FirestoreConversationStore.untouched``): every user's
# conversations by `updatedAt`, one collection-group query. Automatic single-field
# indexes are per collection; a collection-group one is declared. Declaring a field's
# indexes replaces its automatic ones, so its per-collection ones are kept here too.
resource "google_firestore_field" "conversations_by_update" {
  project    = var.project_id
  database   = google_firestore_database.default.name
  collection = "conversations"
  field      = "updatedAt"
  index_config {
    indexes {
      order       = "ASCENDING"
      query_scope = "COLLECTION_GROUP"
    }
    indexes {
      order       = "ASCENDING"
      query_scope = "COLLECTION"
    }
    indexes {
      order       = "DESCENDING"
      query_scope = "COLLECTION"
    }
  }
}

resource "google_firestore_field" "unindexed" {
  for_each = {
    for field in [
      { collection = "conversations", field = "messages" },
      { collection = "conversations", field = "activeRun" },
      { collection = "conversations", field = "queuedMessages" },
      { collection = "conversations", field = "tasks" },
      { collection = "archive", field = "messages" },
      { collection = "lessons", field = "body" },
      { collection = "versions", field = "body" },
      { collection = "tasks", field = "updates" },
      { collection = "tasks", field = "keyOutputs" },
    ] : "${field.collection}.${field.field}" => field
  }
  project    = var.project_id
  database   = google_firestore_database.default.name
  collection = each.value.collection
  field      = each.value.field
  # An empty index_config removes every single-field index of the field.
  index_config {}
}

# Receipts of deliveries sent with an Idempotency-Key (/{uid}/server/deliveries/{id}):
# the code judges one expired after 24 hours; this TTL policy deletes it some time after
# its `expiresAt` (Firestore deletes expired documents within a day or so, not at once).
# The field is a timestamp that only grows and is never queried: no single-field index.
resource "google_firestore_field" "delivery_receipts_expire" {
  project    = var.project_id
  database   = google_firestore_database.default.name
  collection = "deliveries"
  field      = "expiresAt"
  ttl_config {}
  index_config {}
}

# The spent App Check tokens (shared/appcheck/replays.py): each record may go once its
# token has expired (an expired token is refused anyway), so Firestore's TTL drops them.
resource "google_firestore_field" "app_check_tokens_ttl" {
  project    = var.project_id
  database   = google_firestore_database.default.name
  collection = "appCheckTokens"
  field      = "expiresAt"
  ttl_config {}
  index_config {}
}
