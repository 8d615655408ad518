"""Every JSON error's body: its code, plain-words message, request id and, for a body that
did not validate, each problem."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)


class Problem(BaseModel):
    """One problem of a body that did not validate, as the validator put it."""

    field: str = Field(description="The field, as sent: `attachments[0].storagePath`.")
    type: str = Field(description="The validator's name for the problem (pydantic's).")
    detail: str = Field(description="The validator's own words.")


class ErrorDetail(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    code: str
    message: str = Field(description="What went wrong and what to do, in plain words.")
    request_id: str | None = Field(default=None, alias="requestId")
    details: list[Problem] | None = Field(
        default=None,
        description="A body that did not validate (400): each problem, beside the message "
        "that puts them all in plain words.",
    )
    retry_after: int | None = Field(
        default=None,
        alias="retryAfter",
        description="A per-user limit was reached (429): the seconds until a retry may be "
        "admitted, as the Retry-After header says.",
    )
    reason: str | None = Field(
        default=None,
        description="Which parent's control refused a dependent's call (403 "
        "parent_controls): consent, quiet_hours or daily_limit.",
    )


class ErrorBody(BaseModel):
    """Every JSON error: ``{"error": {"code", "message", "requestId", "details"?,
    "retryAfter"?}}``."""

    error: ErrorDetail
