# What an operator is told, and what they can look at (docs/observability.md): alert
# policies on the api's 5xx answers, the runs that fail, the time to the first token, the
# tokens spent in an hour and the task deliveries given up, and one dashboard. The
# functions write their metrics to Cloud Monitoring (SPARK_TELEMETRY=gcp, shared/observe);
# the OpenTelemetry exporter names them workload.googleapis.com/<name>, with each
# attribute's dots written as underscores.

locals {
  workload = "workload.googleapis.com"
  alert_channels = var.alert_email == "" ? [] : [
    google_monitoring_notification_channel.email[0].id
  ]
  api_requests = join(" AND ", [
    "metric.type=\"run.googleapis.com/request_count\"",
    "resource.type=\"cloud_run_revision\"",
    "resource.label.\"service_name\"=\"${local.api_name}\"",
  ])
  runs           = "metric.type=\"${local.workload}/spark.runs\""
  first_token    = "metric.type=\"${local.workload}/gen_ai.client.operation.time_to_first_chunk\" AND metric.label.\"spark_egress_kind\"=\"chat\""
  tokens         = "metric.type=\"${local.workload}/spark.tokens\""
  task_delivered = "metric.type=\"${local.workload}/spark.task.duration\""
}

resource "google_monitoring_notification_channel" "email" {
  count        = var.alert_email == "" ? 0 : 1
  project      = var.project_id
  display_name = "Spark AI Agent alerts"
  type         = "email"
  labels = {
    email_address = var.alert_email
  }
  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "errors" {
  project               = var.project_id
  display_name          = "Spark AI Agent: api 5xx rate"
  combiner              = "OR"
  notification_channels = local.alert_channels
  documentation {
    content   = "More than ${var.alerts.error_ratio * 100} % of the api's answers were 5xx over 5 minutes. Its logs name each failed request's code (docs/observability.md)."
    mime_type = "text/markdown"
  }
  conditions {
    display_name = "5xx answers / all answers"
    condition_threshold {
      filter             = "${local.api_requests} AND metric.label.\"response_code_class\"=\"5xx\""
      denominator_filter = local.api_requests
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alerts.error_ratio
      duration           = "300s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
      denominator_aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
}

resource "google_monitoring_alert_policy" "run_failures" {
  project               = var.project_id
  display_name          = "Spark AI Agent: run failure rate"
  combiner              = "OR"
  notification_channels = local.alert_channels
  documentation {
    content   = "More than ${var.alerts.run_failure_ratio * 100} % of runs ended failed over 15 minutes (spark.runs by spark_run_ending)."
    mime_type = "text/markdown"
  }
  conditions {
    display_name = "failed runs / all runs"
    condition_threshold {
      filter             = "${local.runs} AND metric.label.\"spark_run_ending\"=\"failed\""
      denominator_filter = local.runs
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alerts.run_failure_ratio
      duration           = "900s"
      aggregations {
        alignment_period     = "900s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
      denominator_aggregations {
        alignment_period     = "900s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
}

resource "google_monitoring_alert_policy" "first_token" {
  project               = var.project_id
  display_name          = "Spark AI Agent: time to first token p95"
  combiner              = "OR"
  notification_channels = local.alert_channels
  documentation {
    content   = "The 95th percentile of chat calls' time to the first token was above ${var.alerts.first_token_p95_seconds} s for 10 minutes (gen_ai.client.operation.time_to_first_chunk, by model)."
    mime_type = "text/markdown"
  }
  conditions {
    display_name = "time to first token, p95"
    condition_threshold {
      filter          = local.first_token
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.first_token_p95_seconds
      duration        = "600s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_PERCENTILE_95"
      }
    }
  }
}

resource "google_monitoring_alert_policy" "token_spend" {
  project               = var.project_id
  display_name          = "Spark AI Agent: token spend per hour"
  combiner              = "OR"
  notification_channels = local.alert_channels
  documentation {
    content   = "More than ${var.alerts.tokens_per_hour} tokens were used in the last hour across every model (spark.tokens by gen_ai_request_model and spark_egress_kind)."
    mime_type = "text/markdown"
  }
  conditions {
    display_name = "tokens in an hour"
    condition_threshold {
      filter          = local.tokens
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.tokens_per_hour
      duration        = "0s"
      aggregations {
        alignment_period     = "3600s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
}

resource "google_monitoring_alert_policy" "dead_letters" {
  project               = var.project_id
  display_name          = "Spark AI Agent: task dead letters"
  combiner              = "OR"
  notification_channels = local.alert_channels
  documentation {
    content   = "At least ${var.alerts.dead_letters_per_hour} task deliveries were given up in an hour (spark.task.duration with spark_task_outcome dead_letter): a tool or reply that will not finish."
    mime_type = "text/markdown"
  }
  conditions {
    display_name = "tasks given up in an hour"
    condition_threshold {
      filter          = "${local.task_delivered} AND metric.label.\"spark_task_outcome\"=\"dead_letter\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alerts.dead_letters_per_hour - 0.5
      duration        = "0s"
      aggregations {
        alignment_period     = "3600s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_COUNT"
      }
    }
  }
}

resource "google_monitoring_dashboard" "spark" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "Spark AI Agent"
    mosaicLayout = {
      columns = 12
      tiles = [
        for index, tile in [
          { title = "api requests by class", filter = local.api_requests, aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", by = ["metric.label.\"response_code_class\""] },
          { title = "runs by ending", filter = local.runs, aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", by = ["metric.label.\"spark_run_ending\""] },
          { title = "time to first token p95 (s), by model", filter = local.first_token, aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_95", by = ["metric.label.\"gen_ai_request_model\""] },
          { title = "tokens by model and kind", filter = local.tokens, aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", by = ["metric.label.\"gen_ai_request_model\"", "metric.label.\"spark_egress_kind\""] },
          { title = "task deliveries by outcome", filter = local.task_delivered, aligner = "ALIGN_DELTA", reducer = "REDUCE_COUNT", by = ["metric.label.\"spark_task_outcome\""] },
          { title = "limits refused by kind", filter = "metric.type=\"${local.workload}/spark.limits.refused\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", by = ["metric.label.\"spark_limit\""] },
          { title = "opt-out screens applied", filter = "metric.type=\"${local.workload}/spark.opt_out.screens\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", by = ["metric.label.\"spark_egress_kind\""] },
          { title = "App Check verdicts", filter = "metric.type=\"${local.workload}/spark.app_check.verdicts\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", by = ["metric.label.\"spark_app_check_verdict\""] },
          ] : {
          xPos   = (index % 2) * 6
          yPos   = floor(index / 2) * 4
          width  = 6
          height = 4
          widget = {
            title = tile.title
            xyChart = {
              dataSets = [{
                plotType = "LINE"
                timeSeriesQuery = {
                  timeSeriesFilter = {
                    filter = tile.filter
                    aggregation = {
                      alignmentPeriod    = "300s"
                      perSeriesAligner   = tile.aligner
                      crossSeriesReducer = tile.reducer
                      groupByFields      = tile.by
                    }
                  }
                }
              }]
            }
          }
        }
      ]
    }
  })
  depends_on = [google_project_service.apis]
}
