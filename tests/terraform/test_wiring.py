"""terraform/ wires the system together as the code expects: the queue's target, the
environment each function reads, the secrets, who may call what, the rules released,
the indexes, the package deployed. Parsed with python-hcl2 and evaluated by hcl.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.config import Settings
from shared.config.providers import DEFAULT_MODEL, parse_model
from shared.errors import ConfigurationError
from shared.families.delivery import receipt_path
from shared.schemas.documents import (
    ArchiveSegment,
    Conversation,
    Lesson,
    LessonVersion,
    TaskDocument,
)
from shared.schemas.server import ArchivedFile, Receipt
from shared.schemas.tasks import TASK_PAYLOAD, RetentionTask
from tests.terraform.code import config_variables, firestore_collections, firestore_queries
from tests.terraform.conftest import PROJECT, ROOT
from tests.terraform.hcl import Config, Ref, Scope, dynamic_blocks
from tools import package
from tools.stack import FIRESTORE_RULES

FUNCTIONS = ("api", "tasks")
MODEL_KEYS = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"}
PROJECT_NUMBER = "${data.google_project.this.number}"

# Variables shared/config/ reads that the deployment must NOT set, and why.
LOCAL_ONLY = {
    "FIRESTORE_EMULATOR_HOST": "the Firestore emulator (refused in production)",
    "FIREBASE_AUTH_EMULATOR_HOST": "the Auth emulator (refused in production)",
    "CLOUD_TASKS_EMULATOR_HOST": "the Cloud Tasks emulator (refused in production)",
    "STORAGE_EMULATOR_HOST": "the Cloud Storage emulator (refused in production)",
    "SPARK_TASKS_LOCAL_KEY": "local task signatures (refused in production)",
    "SPARK_OFFLINE_TOKEN_DELAY_MS": "pacing of the offline model, which production refuses",
    "SPARK_TRACE_CONTENT": "what people said, in traces (refused in production)",
    "SPARK_APP_CHECK_JWKS_URL": "a local App Check key set (refused in production)",
}
# Variables the platform sets, or that stand in for one Terraform sets.
PLATFORM = {
    "K_SERVICE": "set by Cloud Run on every instance",
    "FUNCTION_TARGET": "set by Cloud Functions to the function's entry point (api or tasks)",
    "GCLOUD_PROJECT": "an older name of GOOGLE_CLOUD_PROJECT, which is set",
}
# Variables the deployment leaves unset because the code's default is the deployed one.
UNSET = {
    "SPARK_PROMPTS_DIR": "the prompts packaged with the functions (tools/package.py)",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "make dev's trace viewer; a deployment exports to Cloud Trace",
    "SPARK_MODERATION_MODEL": "OpenAI's moderation model, the code's default",
}


def function(config: Config, name: str) -> dict[str, Any]:
    return config.resource("google_cloudfunctions2_function", name)


def service_config(config: Config, name: str) -> dict[str, Any]:
    (service,) = function(config, name)["service_config"]
    return service


def env_of(config: Config, scope: Scope, name: str) -> dict[str, Any]:
    env: dict[str, Any] = scope.eval(service_config(config, name)["environment_variables"])
    return env


def secrets_of(config: Config, scope: Scope, name: str) -> list[dict[str, Any]]:
    return dynamic_blocks(scope, service_config(config, name), "secret_environment_variables")


def queue_target(config: Config, scope: Scope) -> dict[str, Any]:
    (target,) = config.resource("google_cloud_tasks_queue", "tasks")["http_target"]
    (uri,) = target["uri_override"]
    (oidc,) = target["oidc_token"]
    return {
        "method": scope.eval(target["http_method"]),
        "scheme": scope.eval(uri["scheme"]),
        "host": scope.eval(uri["host"]),
        "enforce": scope.eval(uri["uri_override_enforce_mode"]),
        "account": scope.eval(oidc["service_account_email"]),
        "audience": scope.eval(oidc["audience"]),
    }


def test_queue_targets_the_tasks_function_with_the_invokers_oidc_token(
    config: Config, scope: Scope
) -> None:
    target = queue_target(config, scope)
    tasks = function(config, "tasks")
    # The tasks function's own deterministic URL: its name, the project number, its region.
    host = f"{scope.eval(tasks['name'])}-{PROJECT_NUMBER}.{scope.eval(tasks['location'])}.run.app"
    assert target == {
        "method": "POST",
        "scheme": "HTTPS",
        "host": host,
        "enforce": "ALWAYS",
        "account": Ref("google_service_account.task_invoker.email"),
        "audience": f"https://{host}",
    }


def test_both_functions_enqueue_to_that_queue_target_and_audience(
    config: Config, scope: Scope
) -> None:
    target = queue_target(config, scope)
    queue = config.resource("google_cloud_tasks_queue", "tasks")
    for name in FUNCTIONS:
        env = env_of(config, scope, name)
        # The code's task URL is also the audience it puts in, and checks on, each token.
        assert env["SPARK_TASKS_URL"] == target["audience"], name
        assert env["CLOUD_TASKS_SERVICE_ACCOUNT"] == target["account"], name
        assert env["CLOUD_TASKS_QUEUE"] == scope.eval(queue["name"]), name
        assert env["CLOUD_TASKS_LOCATION"] == scope.eval(queue["location"]), name


def test_env_sets_every_variable_the_code_reads(config: Config, scope: Scope) -> None:
    read = config_variables()
    assert set(LOCAL_ONLY) | set(PLATFORM) | set(UNSET) <= set(read), "stale names in this test"
    secrets = set(MODEL_KEYS)
    needed = set(read) - set(LOCAL_ONLY) - set(PLATFORM) - set(UNSET) - secrets
    for name in FUNCTIONS:
        env = env_of(config, scope, name)
        assert needed - set(env) == set(), f"{name}: not set"
        assert set(env) - set(read) == set(), f"{name}: set but never read"
        assert set(env) & (set(LOCAL_ONLY) | set(PLATFORM)) == set(), name
        assert secrets <= {s["key"] for s in secrets_of(config, scope, name)}, name


def test_local_only_variables_are_refused_in_production() -> None:
    production = {
        "K_SERVICE": "spark-api",
        "GOOGLE_CLOUD_PROJECT": "my-spark-project",
        "OPENAI_API_KEY": "sk-test",
        "SPARK_TASKS_URL": "https://spark-tasks-1.europe-west2.run.app",
        "CLOUD_TASKS_SERVICE_ACCOUNT": "invoker@p.iam.gserviceaccount.com",
        "SPARK_APP_URL": "https://p.web.app",
    }
    Settings.from_env(production)
    for name in set(LOCAL_ONLY) - {"SPARK_OFFLINE_TOKEN_DELAY_MS"}:
        with pytest.raises(ConfigurationError):
            Settings.from_env({**production, name: "127.0.0.1:1"})


def concrete(value: Any) -> str:
    """A deployed value: what apply fills in for an attribute known only then."""
    if isinstance(value, Ref) and value.path == PROJECT_NUMBER[2:-1]:
        return "123456789012"
    if isinstance(value, Ref):
        assert value.path.endswith(".email"), value
        return "spark-task-invoker@my-spark-project.iam.gserviceaccount.com"
    return str(value).replace(PROJECT_NUMBER, "123456789012")


def test_the_env_is_a_valid_production_configuration(config: Config, scope: Scope) -> None:
    for name in FUNCTIONS:
        env = {k: concrete(v) for k, v in env_of(config, scope, name).items()}
        env |= {s["key"]: "a-key" for s in secrets_of(config, scope, name)}
        settings = Settings.from_env({**env, "K_SERVICE": f"spark-{name}"})  # checks it
        assert settings.project_id == PROJECT
        assert settings.tasks_url == concrete(queue_target(config, scope)["audience"])
        assert (settings.provider, settings.model) == parse_model(scope.variables["model"])
        assert settings.max_steps == scope.variables["limits"]["SPARK_MAX_STEPS"]
        assert settings.check_revoked is scope.variables["check_revoked"]
        assert not settings.offline_model


def test_limits_default_to_the_codes_own_defaults(config: Config, defaults: Scope) -> None:
    scope = defaults
    code = Settings()
    ints = {v.name: v for v in config_variables().values() if v.kind == "int"}
    limits = scope.variables["limits"]
    assert set(limits) == set(ints) - set(LOCAL_ONLY)
    for name, value in limits.items():
        assert value == getattr(code, ints[name].field), name
    assert scope.variables["model"] == DEFAULT_MODEL
    assert scope.variables["check_revoked"] is code.check_revoked


def test_functions_mount_the_three_model_keys_from_their_secrets(
    config: Config, scope: Scope
) -> None:
    secret_ids = {
        key: scope.eval(f'${{google_secret_manager_secret.model_key["{key}"].secret_id}}')
        for key in MODEL_KEYS
    }
    assert len(set(secret_ids.values())) == 3
    for name in FUNCTIONS:
        mounted = {s["key"]: (s["secret"], s["version"]) for s in secrets_of(config, scope, name)}
        assert mounted == {key: (secret_ids[key], "latest") for key in MODEL_KEYS}, name


def members_of(scope: Scope, config: Config, type_: str) -> list[dict[str, Any]]:
    """Each instance of an IAM member resource, its arguments evaluated."""
    out = []
    for name, body in config.resources(type_).items():
        keys = scope.eval(body["for_each"]) if "for_each" in body else None
        for key in sorted(keys) if keys is not None else [None]:
            address = f"{type_}.{name}" + (f'["{key}"]' if key is not None else "")
            out.append(
                {arg: scope.eval(f"${{{address}.{arg}}}") for arg in body if arg != "for_each"}
            )
    return out


def test_each_function_reads_the_secrets_as_itself_and_nobody_else_does(
    config: Config, scope: Scope
) -> None:
    grants = members_of(scope, config, "google_secret_manager_secret_iam_member")
    runtime = {
        f"serviceAccount:{scope.eval(service_config(config, n)['service_account_email'])}"
        for n in FUNCTIONS
    }
    assert {g["role"] for g in grants} == {"roles/secretmanager.secretAccessor"}
    assert {(g["member"], g["secret_id"]) for g in grants} == {
        (member, scope.eval(f'${{google_secret_manager_secret.model_key["{key}"].secret_id}}'))
        for member in runtime
        for key in MODEL_KEYS
    }


def test_each_function_runs_as_its_own_service_account(config: Config, scope: Scope) -> None:
    accounts = {
        n: scope.eval(service_config(config, n)["service_account_email"]) for n in FUNCTIONS
    }
    assert accounts == {
        "api": Ref("google_service_account.api.email"),
        "tasks": Ref("google_service_account.tasks.email"),
    }
    assert queue_target(config, scope)["account"] not in accounts.values()


def invokers(config: Config, scope: Scope, function_name: str) -> set[str]:
    service = scope.eval(function(config, function_name)["name"])
    found = set()
    for type_ in (
        "google_cloud_run_service_iam_member",
        "google_cloud_run_v2_service_iam_member",
        "google_cloudfunctions2_function_iam_member",
    ):
        for member in members_of(scope, config, type_):
            target = member.get("service") or member.get("name") or member.get("cloud_function")
            if target == service:
                found.add(member["member"])
    return found


def test_tasks_is_private_its_only_invoker_the_task_invoker(config: Config, scope: Scope) -> None:
    invoker = queue_target(config, scope)["account"]
    assert invokers(config, scope, "tasks") == {f"serviceAccount:{invoker}"}
    assert scope.eval(service_config(config, "tasks")["ingress_settings"]) == "ALLOW_INTERNAL_ONLY"
    for type_ in ("google_cloud_run_service_iam_binding", "google_cloud_run_service_iam_policy"):
        assert not config.resources(type_), "bindings and policies would drop other members"


def test_no_public_member_anywhere_but_the_api(config: Config, scope: Scope) -> None:
    public = re.compile(r"allUsers|allAuthenticatedUsers")
    for text in config.files.values():
        for match in public.finditer(text):
            line = text[: match.start()].count("\n")
            block = text[: match.start()].rsplit("\nresource ", 1)[-1].split("\n", 1)[0]
            assert block == '"google_cloud_run_service_iam_member" "api_public" {', (line, block)
    assert invokers(config, scope, "api") == {"allUsers"}
    assert scope.eval(service_config(config, "api")["ingress_settings"]) == "ALLOW_ALL"


def test_firestore_rules_released_are_the_ones_the_emulator_tests(
    config: Config, scope: Scope
) -> None:
    read: list[Path] = []

    def file(path: str) -> str:
        read.append(Path(path).resolve())
        return Path(path).read_text()

    with_files = config.scope(project_id=PROJECT, functions={"file": file})
    ruleset = config.resource("google_firebaserules_ruleset", "firestore")
    ((source,),) = [ruleset["source"]]
    ((rules,),) = [source["files"]]
    assert with_files.eval(rules["content"]) == FIRESTORE_RULES.read_text()
    assert read == [FIRESTORE_RULES]
    release = config.resource("google_firebaserules_release", "firestore")
    assert scope.eval(release["name"]) == "cloud.firestore"
    assert scope.eval(release["ruleset_name"]) == (
        f"projects/{PROJECT}/rulesets/${{google_firebaserules_ruleset.firestore.name}}"
    )


@pytest.mark.parametrize("exists", [False, True])
def test_storage_rules_are_released_only_once_the_file_exists(config: Config, exists: bool) -> None:
    asked: list[Path] = []

    def fileexists(path: str) -> bool:
        asked.append(Path(path).resolve())
        return exists

    scope = config.scope(project_id=PROJECT, functions={"fileexists": fileexists})
    for type_, name in (
        ("google_firebaserules_ruleset", "storage"),
        ("google_firebaserules_release", "storage"),
        ("google_firebase_storage_bucket", "uploads"),
    ):
        assert scope.eval(config.resource(type_, name)["count"]) == int(exists), type_
    assert set(asked) == {ROOT / "storage.rules"}
    bucket = scope.eval(config.resource("google_storage_bucket", "uploads")["name"])
    release = config.resource("google_firebaserules_release", "storage")
    assert scope.eval(release["name"]) == f"firebase.storage/{bucket}"
    # Today's tree: no storage.rules (uploads go through the api's sessions).
    real = config.scope(project_id=PROJECT)
    actual = real.eval(config.resource("google_firebaserules_release", "storage")["count"])
    assert actual == int((ROOT / "storage.rules").is_file())


def test_uploads_bucket_is_private_uniform_and_expires_uploads(config: Config) -> None:
    scope = config.scope(project_id=PROJECT, uploads_retention_days=7)
    bucket = config.resource("google_storage_bucket", "uploads")
    assert scope.eval(bucket["uniform_bucket_level_access"]) is True
    assert scope.eval(bucket["public_access_prevention"]) == "enforced"
    rules = [
        (
            scope.eval(rule["condition"][0].get("age", "${null}")),
            scope.eval(rule["action"][0]["type"]),
        )
        for rule in bucket["lifecycle_rule"]
    ]
    assert (7, "Delete") in rules


def test_queue_attempts_backoff_and_rate_are_bounded(config: Config, scope: Scope) -> None:
    queue = config.resource("google_cloud_tasks_queue", "tasks")
    (retry,) = queue["retry_config"]
    (rates,) = queue["rate_limits"]
    wanted = scope.variables["queue"]
    assert scope.eval(retry["max_attempts"]) == wanted["max_attempts"] >= 1
    assert scope.eval(retry["min_backoff"]) == f"{wanted['min_backoff_seconds']}s"
    assert scope.eval(retry["max_backoff"]) == f"{wanted['max_backoff_seconds']}s"
    assert scope.eval(retry["max_retry_duration"]) == f"{wanted['max_retry_hours'] * 3600}s"
    assert scope.eval(rates["max_dispatches_per_second"]) == wanted["max_dispatches_per_second"]
    assert scope.eval(rates["max_concurrent_dispatches"]) == wanted["max_concurrent_dispatches"]


def test_functions_deploy_the_package_make_package_builds(config: Config, defaults: Scope) -> None:
    scope = defaults
    archive = (config.root / scope.variables["source_archive"]).resolve()
    assert archive == ROOT / "dist" / "functions.zip"
    assert "-m tools.package dist/functions.zip" in (ROOT / "Makefile").read_text()
    obj = config.resource("google_storage_bucket_object", "source")
    assert scope.eval(obj["source"]) == scope.variables["source_archive"]
    main = (ROOT / package.ENTRY_POINTS[0]).read_text()
    for name in FUNCTIONS:
        (build,) = function(config, name)["build_config"]
        (source,) = build["source"]
        (storage,) = source["storage_source"]
        assert storage["object"] == "${google_storage_bucket_object.source.name}"
        assert storage["bucket"] == "${google_storage_bucket.source.name}"
        entry = scope.eval(build["entry_point"])
        assert f"async def {entry}(request: Request)" in main
        runtime = scope.eval(build["runtime"])
        assert runtime == f"python3{sys.version_info.minor}", "the package is tested on this one"


def test_source_object_is_named_by_the_archives_sha256(config: Config, tmp_path: Path) -> None:
    archive = tmp_path / "functions.zip"
    archive.write_bytes(b"any bytes")
    scope = config.scope(project_id=PROJECT, source_archive=str(archive))
    name = scope.eval(config.resource("google_storage_bucket_object", "source")["name"])
    assert name == f"functions-{hashlib.sha256(b'any bytes').hexdigest()}.zip"


def test_code_needs_no_composite_index_that_is_not_declared(config: Config, scope: Scope) -> None:
    declared = {
        tuple(scope.eval(f["field_path"]) for f in body.get("fields", []))
        for body in config.resources("google_firestore_index").values()
    }
    queries = firestore_queries()
    assert queries, "the archive's pages are a query: the scan found none"
    for query in queries:
        if len(set(query.fields)) > 1:
            assert query.fields in declared, f"{query.where} needs a composite index"


def test_unindexed_fields_are_real_fields_of_real_collections(config: Config, scope: Scope) -> None:
    models = {
        "conversations": Conversation,
        "archive": ArchiveSegment,
        "lessons": Lesson,
        "versions": LessonVersion,
        "tasks": TaskDocument,
        "archivedFiles": ArchivedFile,  # listed to delete a conversation's (no exemption)
    }
    assert set(models) == firestore_collections()
    queried = {field for query in firestore_queries() for field in query.fields}
    exempted = scope.eval(config.resource("google_firestore_field", "unindexed")["for_each"])
    assert exempted
    for item in exempted.values():
        properties = models[item["collection"]].model_json_schema(by_alias=True)["properties"]
        assert item["field"] in properties, item
        assert item["field"] not in queried, f"{item} is queried: it needs its index"


def test_apis_cover_every_service_the_resources_use(config: Config, scope: Scope) -> None:
    apis = scope.eval(config.resource("google_project_service", "apis")["for_each"])
    needs = {
        "google_cloudfunctions2_": {
            "cloudfunctions.googleapis.com",
            "run.googleapis.com",
            "cloudbuild.googleapis.com",
            "artifactregistry.googleapis.com",
        },
        "google_cloud_tasks_": {"cloudtasks.googleapis.com"},
        "google_cloud_scheduler_": {"cloudscheduler.googleapis.com"},
        "google_cloud_run_": {"run.googleapis.com"},
        "google_firestore_": {"firestore.googleapis.com"},
        "google_firebaserules_": {"firebaserules.googleapis.com"},
        "google_firebase_project": {"firebase.googleapis.com"},
        "google_firebase_storage_": {"firebasestorage.googleapis.com"},
        "google_secret_manager_": {"secretmanager.googleapis.com"},
        "google_storage_": {"storage.googleapis.com"},
        "google_service_account": {"iam.googleapis.com"},
    }
    used = set(config.blocks["resource"])
    for prefix, services in needs.items():
        if any(type_.startswith(prefix) for type_ in used):
            assert services <= apis, prefix
    # Firebase Auth issues the ID tokens the api checks.
    assert "identitytoolkit.googleapis.com" in apis


def test_providers_are_pinned_to_one_exact_version(config: Config, scope: Scope) -> None:
    (terraform,) = config.blocks["terraform"]
    (providers,) = terraform["required_providers"]
    versions = {name: scope.eval(spec)["version"] for name, spec in providers.items()}
    assert set(versions) == {"google", "google-beta"}
    assert len(set(versions.values())) == 1
    assert re.fullmatch(r"= \d+\.\d+\.\d+", next(iter(versions.values())))


SKIP = re.compile(r"#\s*checkov:skip=(?P<check>[A-Z0-9_]+)(?::(?P<reason>.*))?")


def test_every_checkov_skip_says_why(config: Config) -> None:
    skips = [m for text in config.files.values() for m in SKIP.finditer(text)]
    assert skips, "the api's public access is a justified skip"
    for skip in skips:
        reason = (skip["reason"] or "").strip()
        assert len(reason.split()) >= 6, f"{skip['check']}: say why in a sentence"


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary here")
def test_terraform_files_are_formatted(config: Config) -> None:
    """Where a terraform binary happens to exist, its own formatter agrees."""
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-diff", str(config.root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_delivery_receipts_expire_by_a_ttl_policy_on_their_expires_at(
    config: Config, scope: Scope
) -> None:
    """A receipt (``/{uid}/server/deliveries/{id}``) is judged expired after 24 hours by
    the code; Firestore's TTL deletes it some time after ``expiresAt``, a Timestamp."""
    ttl = config.resource("google_firestore_field", "delivery_receipts_expire")
    collection_group = receipt_path("u", "r")[-2]
    assert scope.eval(ttl["collection"]) == collection_group == "deliveries"
    assert scope.eval(ttl["field"]) == "expiresAt"
    assert ttl["ttl_config"] == [{}]
    # A monotonically growing timestamp, never queried: no single-field index.
    assert ttl["index_config"] == [{}]
    expires = Receipt.model_json_schema(by_alias=True)["properties"]["expiresAt"]
    assert "Timestamp" in json.dumps(expires)
    queried = {field for query in firestore_queries() for field in query.fields}
    assert "expiresAt" not in queried


def test_retention_off_declares_no_sweep_and_no_lifecycle_rule(config: Config) -> None:
    scope = config.scope(project_id=PROJECT)
    job = config.resource("google_cloud_scheduler_job", "retention")
    assert scope.eval(job["count"]) == 0
    bucket = config.resource("google_storage_bucket", "uploads")
    assert dynamic_blocks(scope, bucket, "lifecycle_rule") == []


@pytest.mark.parametrize("days", [1, 400])
def test_retention_sweeps_daily_as_the_task_invoker_and_expires_files_at_that_age(
    config: Config, days: int
) -> None:
    scope = config.scope(project_id=PROJECT, limits={"SPARK_RETENTION_DAYS": days})
    job = config.resource("google_cloud_scheduler_job", "retention")
    assert scope.eval(job["count"]) == 1
    assert scope.eval(job["region"]) == scope.variables["region"]
    minute, hour, *every = scope.eval(job["schedule"]).split()
    assert every == ["*", "*", "*"] and minute.isdigit() and hour.isdigit(), "once a day"
    (target,) = job["http_target"]
    (oidc,) = target["oidc_token"]
    queue = queue_target(config, scope)
    # The one identity and audience the tasks function accepts (as for Cloud Tasks' calls).
    assert scope.eval(oidc["service_account_email"]) == queue["account"]
    assert scope.eval(oidc["audience"]) == queue["audience"]
    assert scope.eval(target["uri"]).rstrip("/") == queue["audience"]
    assert scope.eval(target["http_method"]) == "POST"
    body = base64.b64decode(scope.eval(target["body"]))
    assert isinstance(TASK_PAYLOAD.validate_json(body), RetentionTask)
    for name in FUNCTIONS:
        assert env_of(config, scope, name)["SPARK_RETENTION_DAYS"] == str(days)
    bucket = config.resource("google_storage_bucket", "uploads")
    rules = dynamic_blocks(scope, bucket, "lifecycle_rule")
    assert [(r["condition"][0]["age"], r["action"][0]["type"]) for r in rules] == [(days, "Delete")]


def test_collection_group_queries_have_a_collection_group_index(
    config: Config, scope: Scope
) -> None:
    source = (ROOT / "shared/store/firestore/conversations.py").read_text()
    groups = set(re.findall(r"collection_group\(\"(\w+)\"\)", source))
    assert groups == {"conversations"}, "the retention sweep's query: found no other"
    field = config.resource("google_firestore_field", "conversations_by_update")
    assert scope.eval(field["collection"]) == "conversations"
    assert scope.eval(field["field"]) == "updatedAt"
    (index,) = field["index_config"]
    scopes = {(scope.eval(i["order"]), scope.eval(i["query_scope"])) for i in index["indexes"]}
    assert ("ASCENDING", "COLLECTION_GROUP") in scopes
    # Declared indexes replace the automatic ones: the per-collection pair stays.
    assert {("ASCENDING", "COLLECTION"), ("DESCENDING", "COLLECTION")} <= scopes
