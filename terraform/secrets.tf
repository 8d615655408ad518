# The model providers' API keys. Terraform makes the secrets and who may read them, never
# their values (which would then sit in the state): add a version to each with
#   printf %s "$KEY" | gcloud secrets versions add SECRET_ID --data-file=-
# before the functions are deployed (see README: Deploy).

resource "google_secret_manager_secret" "model_key" {
  for_each  = local.model_keys
  project   = var.project_id
  secret_id = "${var.name_prefix}-${lower(replace(each.key, "_", "-"))}"
  labels    = local.labels
  replication {
    auto {}
  }
  depends_on = [google_project_service.apis]
}

# Each function reads each key; nobody else does.
resource "google_secret_manager_secret_iam_member" "model_key" {
  for_each = {
    for pair in setproduct(keys(local.runtime_members), local.model_keys) :
    "${pair[0]}/${pair[1]}" => { member = local.runtime_members[pair[0]], key = pair[1] }
  }
  project   = var.project_id
  secret_id = google_secret_manager_secret.model_key[each.value.key].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = each.value.member
}
