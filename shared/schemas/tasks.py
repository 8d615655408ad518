"""The bodies of Cloud Tasks calls to the ``tasks`` function (JSON, camelCase)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel

_ID = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")


class _Payload(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    user_id: str = Field(min_length=1, max_length=128)
    conversation_id: str = _ID

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


class ToolTask(_Payload):
    """Run attempt ``attempt`` of a task tool call, then continue the agent."""

    kind: Literal["tool"] = "tool"
    task_id: str = _ID
    attempt: int = Field(ge=1)


class ReplyTask(_Payload):
    """Produce the reply of a run opened by a ``202`` send (acknowledge-only mode)."""

    kind: Literal["reply"] = "reply"
    run_id: str = _ID


class WatchdogTask(_Payload):
    """Check on a run once its lease has lapsed: close it if its producer died, produce
    it if nobody did, or look again later."""

    kind: Literal["watchdog"] = "watchdog"
    run_id: str = _ID


class ExpireTask(_Payload):
    """A client-executed tool call's time is up: give it an error result if unanswered."""

    kind: Literal["expire"] = "expire"
    tool_call_id: str = _ID
    after_seconds: int = Field(default=0, ge=0)


class FollowUpTask(_Payload):
    """Continue the agent once every call of ``message_id`` has its result (used when
    another run held the conversation as the last result arrived)."""

    kind: Literal["follow_up"] = "follow_up"
    message_id: str = _ID
    attempt: int = Field(default=0, ge=0, le=100)


class EraseTask(BaseModel):
    """Take an account's erasure one step on (DESIGN §15): ``step`` is the version of its
    deletion record this delivery was enqueued after (the task's name); the record, not
    the task, says what is left to do."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    kind: Literal["erase"] = "erase"
    user_id: str = Field(min_length=1, max_length=128)
    deletion_id: str = _ID
    step: int = Field(default=0, ge=0)

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


class RetentionTask(BaseModel):
    """One page of the daily retention sweep (DESIGN §15): delete the conversations last
    changed before ``cutoff``. Cloud Scheduler sends ``{"kind": "retention"}`` (the
    cutoff is then ``SPARK_RETENTION_DAYS`` before now); a page that leaves more to do
    enqueues the next, ``page`` + 1, with the same cutoff."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    kind: Literal["retention"] = "retention"
    cutoff: datetime | None = None
    page: int = Field(default=0, ge=0)

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


AnyTask = (
    ToolTask | ReplyTask | WatchdogTask | ExpireTask | FollowUpTask | EraseTask | RetentionTask
)
TaskPayload = Annotated[AnyTask, Field(discriminator="kind")]
TASK_PAYLOAD: TypeAdapter[AnyTask] = TypeAdapter(TaskPayload)
