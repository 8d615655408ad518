"""The body and answer of ``PUT /api/spark/families/{familyId}/members/{userId}/controls``
(DESIGN §16): a dependent's parents' controls and consent."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

from shared.schemas.api.common import Inbound
from shared.schemas.documents import Consent, Controls, QuietHours
from shared.schemas.documents.family import CLOCK_TIME, zone

MAX_DAILY_TURNS = 500


class ConsentBody(Inbound):
    """Which processors may receive the dependent's data; each one must be given."""

    chat: StrictBool = Field(description="The chat model's provider (every reply).")
    speech: StrictBool = Field(description="The speech provider (replies read aloud).")
    transcription: StrictBool = Field(
        description="The transcription provider (voice clips, live-audio sessions)."
    )
    moderation: StrictBool = Field(
        description="The moderator. Where the dependent's turns are judged, false also "
        "refuses their chat: a turn that cannot be judged is not answered."
    )


class QuietHoursBody(Inbound):
    """A daily window in which the dependent's sends are refused (it may cross midnight)."""

    start: StrictStr = Field(pattern=CLOCK_TIME, description="HH:MM, 24-hour.")
    end: StrictStr = Field(pattern=CLOCK_TIME, description="HH:MM, 24-hour.")
    time_zone: StrictStr = Field(
        alias="timeZone", max_length=64, description="An IANA time zone: Europe/London."
    )

    @field_validator("time_zone")
    @classmethod
    def _known(cls, value: str) -> str:
        zone(value)
        return value


class ControlsRequest(Inbound):
    """``PUT .../members/{userId}/controls``: the dependent's controls, whole (what is
    left out is off: no quiet hours, no daily limit)."""

    consent: ConsentBody
    quiet_hours: QuietHoursBody | None = Field(default=None, alias="quietHours")
    daily_turns: StrictInt | None = Field(
        default=None,
        alias="dailyTurns",
        ge=1,
        le=MAX_DAILY_TURNS,
        description="The user turns a day (in the quiet hours' time zone, else UTC).",
    )

    def controls(self) -> Controls:
        """The controls this body sets."""
        quiet = self.quiet_hours
        return Controls(
            consent=Consent(**self.consent.model_dump()),
            quiet_hours=None
            if quiet is None
            else QuietHours(start=quiet.start, end=quiet.end, time_zone=quiet.time_zone),
            daily_turns=self.daily_turns,
        )


class ConsentInfo(BaseModel):
    chat: bool
    speech: bool
    transcription: bool
    moderation: bool


class QuietHoursInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    start: str
    end: str
    time_zone: str = Field(alias="timeZone")


class ControlsInfo(BaseModel):
    """A dependent's controls, as their mirror (`/{uid}/client/settings/controls`) holds
    them."""

    model_config = ConfigDict(populate_by_name=True)

    consent: ConsentInfo
    quiet_hours: QuietHoursInfo | None = Field(default=None, alias="quietHours")
    daily_turns: int | None = Field(default=None, alias="dailyTurns")
    updated_at: datetime | None = Field(default=None, alias="updatedAt")

    @classmethod
    def of(cls, controls: Controls) -> ControlsInfo:
        quiet = controls.quiet_hours
        return cls(
            consent=ConsentInfo(**controls.consent.model_dump()),
            quiet_hours=None
            if quiet is None
            else QuietHoursInfo(start=quiet.start, end=quiet.end, time_zone=quiet.time_zone),
            daily_turns=controls.daily_turns,
            updated_at=controls.updated_at,
        )


class ControlsResponse(BaseModel):
    """``{controls}``: the dependent's controls as set."""

    controls: ControlsInfo
