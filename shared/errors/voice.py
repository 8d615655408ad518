"""The errors of voice: live-audio sessions, the audio provider, and clips with no words."""

from __future__ import annotations

from shared.errors.requests import NotFound, RequestError, UnprocessableContent


class VoiceSessionNotFound(NotFound):
    """No live-audio session with this id was minted for the caller (another user's is
    not said to exist)."""

    code = "voice_session_not_found"


class VoiceUnavailable(RequestError):
    """Voice needs an audio provider (OpenAI or Gemini) and this deployment runs
    offline, or on a provider without audio and names none beside it: a live-audio
    session, a spoken reply, or a voice clip with nothing to transcribe it."""

    status = 409
    code = "voice_unavailable"


class VoiceSessionUsed(RequestError):
    """A live-audio session is redeemed once, by the first voice message naming it; it
    then belongs to that conversation and cannot carry messages into another."""

    status = 409
    code = "voice_session_used"


class VoiceSessionEnded(RequestError):
    """The live-audio session is over (``SPARK_VOICE_SESSION_MINUTES`` after it began)."""

    status = 410
    code = "voice_session_ended"


class NoSpeech(UnprocessableContent):
    """A voice clip in which nothing could be heard: silence, or no words."""

    code = "no_speech"
