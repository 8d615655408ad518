# Inputs. Every variable but the true/false ones has a validation, and tests/terraform
# checks each one: its default passes, and a bad value fails.

variable "project_id" {
  description = "The Google Cloud project to deploy into (it must have billing enabled)."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a Google Cloud project id: 6 to 30 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "region" {
  description = "Region of the functions, the task queue and the buckets."
  type        = string
  default     = "europe-west2"
  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Google Cloud region such as europe-west2."
  }
}

variable "firestore_location" {
  description = "Location of the Firestore database: a region (cheaper, beside the functions) or a multi-region (nam5, eur3). It cannot be changed later."
  type        = string
  default     = "europe-west2"
  validation {
    condition     = can(regex("^(nam5|eur3|[a-z]+-[a-z]+[0-9]+)$", var.firestore_location))
    error_message = "firestore_location must be a region such as europe-west2, or nam5 or eur3."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name (functions, service accounts, queue, buckets, secrets)."
  type        = string
  default     = "spark"
  validation {
    # Service account ids are 6-30 characters ("<prefix>-task-invoker" is the longest),
    # and "<prefix>-tasks-<project number>" must fit in one DNS label for the tasks
    # function's deterministic URL.
    condition     = can(regex("^[a-z][a-z0-9-]{1,15}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3 to 17 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "model" {
  description = "SPARK_MODEL: the model the agent uses (a name, or provider:model)."
  type        = string
  default     = "gpt-4o-mini"
  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$", var.model))
    error_message = "model must be a model name such as gpt-4o-mini or openai:gpt-4o-mini, without spaces."
  }
}

variable "transcribe_model" {
  description = "SPARK_TRANSCRIBE_MODEL: what transcribes voice clips, openai:<model> or google:<model> (Anthropic's models take no audio). Empty: gpt-4o-mini-transcribe, or the Gemini model when model is google:."
  type        = string
  default     = ""
  validation {
    condition     = var.transcribe_model == "" || can(regex("^(openai:|google:)?[A-Za-z0-9][A-Za-z0-9._/@-]{0,199}$", var.transcribe_model))
    error_message = "transcribe_model must be empty or a model such as gpt-4o-mini-transcribe, openai:gpt-4o-mini-transcribe or google:gemini-2.5-flash, without spaces."
  }
}

variable "openai_base_url" {
  description = "OPENAI_BASE_URL: the OpenAI-compatible API the agent calls (https only)."
  type        = string
  default     = "https://api.openai.com/v1"
  validation {
    condition     = can(regex("^https://[^\\s/]+(/\\S*)?$", var.openai_base_url))
    error_message = "openai_base_url must be an https URL."
  }
}

variable "anthropic_base_url" {
  description = "ANTHROPIC_BASE_URL: the Anthropic Messages API the agent calls (https only)."
  type        = string
  default     = "https://api.anthropic.com"
  validation {
    condition     = can(regex("^https://[^\\s/]+(/\\S*)?$", var.anthropic_base_url))
    error_message = "anthropic_base_url must be an https URL."
  }
}

variable "gemini_base_url" {
  description = "GEMINI_BASE_URL: the Gemini API the agent calls (https only)."
  type        = string
  default     = "https://generativelanguage.googleapis.com"
  validation {
    condition     = can(regex("^https://[^\\s/]+(/\\S*)?$", var.gemini_base_url))
    error_message = "gemini_base_url must be an https URL."
  }
}

variable "python_runtime" {
  description = "Cloud Functions runtime of both functions (make test checks the package on the local Python)."
  type        = string
  default     = "python311"
  validation {
    condition     = contains(["python311", "python312", "python313"], var.python_runtime)
    error_message = "python_runtime must be python311, python312 or python313 (pyproject.toml allows 3.11 to 3.13)."
  }
}

variable "source_archive" {
  description = "The functions' source archive, built by `make package`."
  type        = string
  default     = "../dist/functions.zip"
  validation {
    condition     = endswith(var.source_archive, ".zip")
    error_message = "source_archive must be the .zip that `make package` builds."
  }
}

variable "limits" {
  description = "The agent's limits, passed to both functions as environment variables (shared/config.py reads them; tests check each default here equals the code's own)."
  type = object({
    SPARK_THROTTLE_MS                      = optional(number, 500)
    SPARK_KEEPALIVE_SECONDS                = optional(number, 15)
    SPARK_RUN_LEASE_SECONDS                = optional(number, 90)
    SPARK_PROVIDER_IDLE_SECONDS            = optional(number, 60)
    SPARK_WATCHDOG_GRACE_SECONDS           = optional(number, 30)
    SPARK_CLIENT_TOOL_TIMEOUT_SECONDS      = optional(number, 300)
    SPARK_LIVE_DOC_BYTES                   = optional(number, 262144)
    SPARK_RUNS_PER_USER                    = optional(number, 3)
    SPARK_DAILY_TOKENS_PER_USER            = optional(number, 2000000)
    SPARK_DAILY_UPLOADS_PER_USER           = optional(number, 100)
    SPARK_RESUME_STREAMS_PER_USER          = optional(number, 10)
    SPARK_QUEUED_MESSAGES_PER_CONVERSATION = optional(number, 10)
    SPARK_QUEUED_MESSAGE_BYTES             = optional(number, 131072)
    SPARK_ATTACHMENT_DECODES_AT_ONCE       = optional(number, 1)
    SPARK_VOICE_DECODES_AT_ONCE            = optional(number, 1)
    SPARK_CHAT_BODY_BUDGET_BYTES           = optional(number, 67108864)
    SPARK_CHAT_BODY_WAIT_SECONDS           = optional(number, 5)
    SPARK_TASK_CALLS_PER_STEP              = optional(number, 5)
    SPARK_TASKS_QUEUED_PER_USER            = optional(number, 20)
    SPARK_HISTORY_CHARS                    = optional(number, 200000)
    SPARK_ATTACHMENT_IMAGES                = optional(number, 4)
    SPARK_ATTACHMENT_IMAGE_BYTES           = optional(number, 10485760)
    SPARK_ATTACHMENT_TEXT_CHARS            = optional(number, 60000)
    SPARK_MAX_STEPS                        = optional(number, 10)
    SPARK_HISTORY_MESSAGES                 = optional(number, 20)
    SPARK_HISTORY_STEP                     = optional(number, 10)
    SPARK_CACHED_INPUT_PERCENT             = optional(number, 10)
    SPARK_TOOL_OUTPUT_CHARS                = optional(number, 8000)
    SPARK_LESSON_VERSIONS_KEPT             = optional(number, 20)
    SPARK_TASKS_PER_USER                   = optional(number, 3)
    SPARK_TASK_MAX_ATTEMPTS                = optional(number, 3)
    SPARK_TASK_RETRY_BASE_MS               = optional(number, 2000)
    SPARK_TASK_LEASE_SECONDS               = optional(number, 120)
    SPARK_FAMILY_MAX_MEMBERS               = optional(number, 10)
    SPARK_FAMILY_INVITES_PER_HOUR          = optional(number, 20)
    SPARK_FAMILY_JOINS_PER_HOUR            = optional(number, 10)
    SPARK_FAMILY_MESSAGES_PER_MINUTE       = optional(number, 20)
    SPARK_FAMILY_MESSAGE_BYTES_PER_HOUR    = optional(number, 1048576)
    SPARK_VOICE_SESSIONS_PER_DAY           = optional(number, 20)
    SPARK_VOICE_SECRET_SECONDS             = optional(number, 60)
    SPARK_VOICE_SESSION_MINUTES            = optional(number, 30)
    SPARK_VOICE_MAX_SECONDS                = optional(number, 120)
    SPARK_RETENTION_DAYS                   = optional(number, 0)
    SPARK_MODERATION_SECONDS               = optional(number, 10)
  })
  default = {}
  validation {
    # The same minimums as shared/config.py (1 unless named here).
    condition = alltrue([
      for name, value in var.limits : floor(value) == value && value >= lookup({
        SPARK_THROTTLE_MS                   = 0
        SPARK_WATCHDOG_GRACE_SECONDS        = 0
        SPARK_TASK_RETRY_BASE_MS            = 0
        SPARK_LIVE_DOC_BYTES                = 16384
        SPARK_HISTORY_CHARS                 = 1000
        SPARK_CACHED_INPUT_PERCENT          = 0
        SPARK_ATTACHMENT_IMAGES             = 0
        SPARK_ATTACHMENT_IMAGE_BYTES        = 0
        SPARK_ATTACHMENT_TEXT_CHARS         = 0
        SPARK_QUEUED_MESSAGE_BYTES          = 65536
        SPARK_FAMILY_MAX_MEMBERS            = 2
        SPARK_VOICE_SECRET_SECONDS          = 10
        SPARK_FAMILY_MESSAGE_BYTES_PER_HOUR = 65536
        SPARK_CHAT_BODY_BUDGET_BYTES        = 33554432
        SPARK_CHAT_BODY_WAIT_SECONDS        = 0
        SPARK_RETENTION_DAYS                = 0
      }, name, 1)
    ])
    error_message = "Each limit must be a whole number, at least 1 (0 for SPARK_THROTTLE_MS, SPARK_WATCHDOG_GRACE_SECONDS, SPARK_TASK_RETRY_BASE_MS and the SPARK_ATTACHMENT_ size limits; 16384 for SPARK_LIVE_DOC_BYTES; 1000 for SPARK_HISTORY_CHARS; 0 for SPARK_CACHED_INPUT_PERCENT; 65536 for SPARK_QUEUED_MESSAGE_BYTES and SPARK_FAMILY_MESSAGE_BYTES_PER_HOUR; 2 for SPARK_FAMILY_MAX_MEMBERS; 10 for SPARK_VOICE_SECRET_SECONDS; 33554432 for SPARK_CHAT_BODY_BUDGET_BYTES; 0 for SPARK_CHAT_BODY_WAIT_SECONDS and SPARK_RETENTION_DAYS)."
  }
}

variable "app_url" {
  description = "SPARK_APP_URL: the web app's https origin, where invite links point ({app_url}/join?token=...). Empty means the project's Firebase Hosting site, https://<project_id>.web.app."
  type        = string
  default     = ""
  validation {
    condition     = var.app_url == "" || can(regex("^https://[^\\s/?#]+(/[^\\s?#]*[^\\s?#/])?$", var.app_url))
    error_message = "app_url must be an https origin (or path) without a trailing slash, query or fragment, such as https://spark.example.com; or empty for https://<project_id>.web.app."
  }
}

variable "live_model" {
  description = "SPARK_LIVE_MODEL: provider:model of live audio (an OpenAI Realtime transcription or Gemini Live model). Empty means the default of SPARK_MODEL's provider (none on Anthropic)."
  type        = string
  default     = ""
  validation {
    condition     = var.live_model == "" || can(regex("^(openai|google):[A-Za-z0-9][A-Za-z0-9._/@-]{0,199}$", var.live_model))
    error_message = "live_model must be openai:<model> or google:<model>, or empty."
  }
}

variable "speech_model" {
  description = "SPARK_SPEECH_MODEL: provider:model of spoken replies (OpenAI audio.speech or Gemini TTS). Empty means the default of SPARK_MODEL's provider (none on Anthropic)."
  type        = string
  default     = ""
  validation {
    condition     = var.speech_model == "" || can(regex("^(openai|google):[A-Za-z0-9][A-Za-z0-9._/@-]{0,199}$", var.speech_model))
    error_message = "speech_model must be openai:<model> or google:<model>, or empty."
  }
}

variable "speech_voice" {
  description = "SPARK_SPEECH_VOICE: the voice of spoken replies. Empty means the provider's default (OpenAI fable, Gemini Kore)."
  type        = string
  default     = ""
  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{0,40}$", var.speech_voice))
    error_message = "speech_voice must be a voice name (letters, digits, - or _), or empty."
  }
}

variable "check_revoked" {
  description = "SPARK_CHECK_REVOKED: also ask Firebase Auth whether each ID token was revoked (one more call per request)."
  type        = bool
  default     = false
}

variable "api_scaling" {
  description = "The api function: instances at most, concurrent requests per instance (streams are long), memory."
  type = object({
    max_instances = optional(number, 10)
    concurrency   = optional(number, 80)
    memory        = optional(string, "512Mi")
  })
  default = {}
  validation {
    condition = (
      var.api_scaling.max_instances >= 1 && var.api_scaling.max_instances <= 1000 &&
      var.api_scaling.concurrency >= 1 && var.api_scaling.concurrency <= 1000 &&
      can(regex("^[0-9]+(Mi|Gi)$", var.api_scaling.memory))
    )
    error_message = "api_scaling: max_instances and concurrency from 1 to 1000; memory such as 512Mi or 1Gi."
  }
}

variable "tasks_scaling" {
  description = "The tasks function: instances at most, concurrent task calls per instance, memory."
  type = object({
    max_instances = optional(number, 5)
    concurrency   = optional(number, 20)
    memory        = optional(string, "512Mi")
  })
  default = {}
  validation {
    condition = (
      var.tasks_scaling.max_instances >= 1 && var.tasks_scaling.max_instances <= 1000 &&
      var.tasks_scaling.concurrency >= 1 && var.tasks_scaling.concurrency <= 1000 &&
      can(regex("^[0-9]+(Mi|Gi)$", var.tasks_scaling.memory))
    )
    error_message = "tasks_scaling: max_instances and concurrency from 1 to 1000; memory such as 512Mi or 1Gi."
  }
}

variable "queue" {
  description = "The Cloud Tasks queue: dispatch rate and concurrency, and how often and how far apart one task is retried (the tasks function answers 409 while another delivery holds a task)."
  type = object({
    max_dispatches_per_second = optional(number, 20)
    max_concurrent_dispatches = optional(number, 50)
    max_attempts              = optional(number, 10)
    min_backoff_seconds       = optional(number, 1)
    max_backoff_seconds       = optional(number, 300)
    max_retry_hours           = optional(number, 24)
  })
  default = {}
  validation {
    condition = (
      var.queue.max_dispatches_per_second > 0 && var.queue.max_dispatches_per_second <= 500 &&
      var.queue.max_concurrent_dispatches >= 1 && var.queue.max_concurrent_dispatches <= 5000 &&
      var.queue.max_attempts >= 1 && var.queue.max_attempts <= 100 &&
      var.queue.min_backoff_seconds >= 0.1 &&
      var.queue.max_backoff_seconds >= var.queue.min_backoff_seconds &&
      var.queue.max_retry_hours >= 1 && var.queue.max_retry_hours <= 720
    )
    error_message = "queue: attempts must be bounded (1 to 100), with 0 < rate <= 500/s, 1 to 5000 concurrent dispatches, min_backoff_seconds >= 0.1 and <= max_backoff_seconds, and 1 to 720 hours of retries."
  }
}

variable "uploads_retention_days" {
  description = "Uploaded attachments are deleted this many days after upload."
  type        = number
  default     = 30
  validation {
    condition     = var.uploads_retention_days >= 1 && var.uploads_retention_days <= 3650 && floor(var.uploads_retention_days) == var.uploads_retention_days
    error_message = "uploads_retention_days must be a whole number of days from 1 to 3650."
  }
}

variable "deletion_protection" {
  description = "Protect the Firestore database and the uploads bucket from `terraform destroy`."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels put on every resource that takes them."
  type        = map(string)
  default     = { app = "spark-agent" }
  validation {
    condition = alltrue([
      for key, value in var.labels :
      can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))
    ])
    error_message = "Label keys must start with a lowercase letter; keys and values are at most 63 lowercase letters, digits, hyphens or underscores."
  }
}

variable "moderation" {
  description = "SPARK_MODERATION: whose turns and replies are moderated (DESIGN §16): off, dependents (a family's dependents) or everyone."
  type        = string
  default     = "dependents"
  validation {
    condition     = contains(["off", "dependents", "everyone"], var.moderation)
    error_message = "moderation must be off, dependents or everyone."
  }
}

variable "moderation_fail" {
  description = "SPARK_MODERATION_FAIL: a dependent's turn when the moderator fails: closed (not answered; they are asked to try again) or open (it goes on). An adult's always goes on."
  type        = string
  default     = "closed"
  validation {
    condition     = contains(["closed", "open"], var.moderation_fail)
    error_message = "moderation_fail must be closed or open."
  }
}

variable "helpline" {
  description = "SPARK_HELPLINE: the helpline a young learner is given when what they wrote speaks of self-harm (UK Childline by default)."
  type        = string
  default     = "Childline on 0800 1111 (free, any time, and it will not show on a phone bill)"
  validation {
    condition     = length(var.helpline) > 0 && length(var.helpline) <= 200
    error_message = "helpline must be 1 to 200 characters."
  }
}

variable "app_check" {
  description = "SPARK_APP_CHECK: off, monitor (verify and count, refuse nothing) or enforce (refuse a call without a valid App Check token; the costly ones consume theirs)."
  type        = string
  default     = "monitor"
  validation {
    condition     = contains(["off", "monitor", "enforce"], var.app_check)
    error_message = "app_check must be off, monitor or enforce."
  }
}

variable "alert_email" {
  description = "Where the alerts are sent (an e-mail notification channel); empty: they open incidents in the console only."
  type        = string
  default     = ""
  validation {
    condition     = var.alert_email == "" || can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", var.alert_email))
    error_message = "alert_email must be empty or one e-mail address."
  }
}

variable "alerts" {
  description = "The alerts' thresholds: the api's share of 5xx answers, the share of runs that fail, the 95th percentile of the time to the first token (seconds), the tokens used in an hour (set it near the sum of users' daily budgets / 24), and task deliveries given up in an hour."
  type = object({
    error_ratio             = optional(number, 0.05)
    run_failure_ratio       = optional(number, 0.1)
    first_token_p95_seconds = optional(number, 5)
    tokens_per_hour         = optional(number, 10000000)
    dead_letters_per_hour   = optional(number, 1)
  })
  default = {}
  validation {
    condition = (
      var.alerts.error_ratio > 0 && var.alerts.error_ratio <= 1
      && var.alerts.run_failure_ratio > 0 && var.alerts.run_failure_ratio <= 1
      && var.alerts.first_token_p95_seconds > 0
      && var.alerts.tokens_per_hour >= 1
      && var.alerts.dead_letters_per_hour >= 1
    )
    error_message = "alerts: the ratios must be above 0 and at most 1, the seconds above 0, and the counts at least 1."
  }
}
