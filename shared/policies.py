"""Each part's policy, read from the ``Settings``: a run's limits, how task tools are run
and retried, and families' rules (``wiring.py`` hands them to the parts it builds)."""

from __future__ import annotations

from datetime import timedelta

from shared.agent import AttachmentBudget, QueueLimits, RunLimits
from shared.config import Settings
from shared.families.service import FamilyPolicy
from shared.tasks.handler import TaskPolicy


def limits_of(settings: Settings) -> RunLimits:
    """A run's limits."""
    return RunLimits(
        max_steps=settings.max_steps,
        history_messages=settings.history_messages,
        tool_output_chars=settings.tool_output_chars,
        throttle_seconds=settings.throttle_ms / 1000,
        lease_seconds=settings.run_lease_seconds,
        provider_idle_seconds=settings.provider_idle_seconds,
        client_tool_timeout_seconds=settings.client_tool_timeout_seconds,
        live_doc_bytes=settings.live_doc_bytes,
        task_calls_per_step=settings.task_calls_per_step,
        history_chars=settings.history_chars,
        attachments=AttachmentBudget(
            settings.attachment_images,
            settings.attachment_image_bytes,
            settings.attachment_text_chars,
        ),
        queue=QueueLimits(settings.queued_messages_per_conversation, settings.queued_message_bytes),
        history_step=settings.history_step,
    )


def task_policy_of(settings: Settings) -> TaskPolicy:
    """How the tasks function runs and retries task tools."""
    return TaskPolicy(
        max_attempts=settings.task_max_attempts,
        retry_base=timedelta(milliseconds=settings.task_retry_base_ms),
        lease=timedelta(seconds=settings.task_lease_seconds),
        output_chars=settings.tool_output_chars,
        busy_wait=timedelta(seconds=settings.run_lease_seconds / 3),
    )


def family_policy_of(settings: Settings) -> FamilyPolicy:
    """Families' rules: their size, and how often invites and joins may come."""
    return FamilyPolicy(
        app_url=settings.app_url.rstrip("/"),
        max_members=settings.family_max_members,
        invites_per_hour=settings.family_invites_per_hour,
        joins_per_hour=settings.family_joins_per_hour,
    )
