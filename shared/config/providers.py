"""Whose models the settings choose: ``SPARK_MODEL`` and the audio models parsed into a
provider and a model, and each provider's key and base URL found among the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, cast, get_args

from shared.errors import ConfigurationError

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TRANSCRIBE_MODEL = "gpt-4o-mini-transcribe"

Provider = Literal["openai", "anthropic", "google"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)


# OpenAI's fine-tuned models are named ``ft:<base>:<org>::<id>``: a bare name with colons.
_FINE_TUNE = "ft"


def parse_model(spec: str) -> tuple[Provider, str]:
    """``SPARK_MODEL`` as (provider, model): ``anthropic:claude-sonnet-4-5`` names its
    provider; a bare name (``gpt-4o-mini``, or a fine-tune's ``ft:…``) is OpenAI's.

    Raises:
        ConfigurationError: a prefix that names no provider (``antropic:…``,
            ``mistral:large``), which would otherwise go to OpenAI as a model's name;
            or a provider with no model after it.
    """
    prefix, colon, model = spec.partition(":")
    if not colon:
        return "openai", spec
    named = prefix.strip().lower()
    for provider in PROVIDERS:
        if named == provider:
            if not model.strip():
                raise ConfigurationError(f"SPARK_MODEL={spec!r} names no model after the colon")
            return provider, model.strip()
    if named == _FINE_TUNE:
        return "openai", spec
    valid = ", ".join(f"{p}:" for p in PROVIDERS)
    raise ConfigurationError(
        f"SPARK_MODEL={spec!r} names no provider we know ({prefix!r}); write the model as "
        f"provider:model with one of {valid} (a bare name such as {DEFAULT_MODEL} is "
        "OpenAI's; a model whose own name has a colon is written openai:name)."
    )


AudioPurpose = Literal["live", "speech"]

DEFAULT_AUDIO_MODELS: dict[AudioPurpose, dict[Provider, str]] = {
    # Anthropic has no audio: a deployment on it names an OpenAI or Gemini model.
    "live": {"openai": "gpt-4o-mini-transcribe", "google": "gemini-live-2.5-flash-preview"},
    "speech": {"openai": "gpt-4o-mini-tts", "google": "gemini-2.5-flash-preview-tts"},
}


@dataclass(frozen=True, slots=True)
class AudioModel:
    """Whose model makes live audio or speech, and how its provider is reached."""

    provider: Provider
    model: str
    api_key: str | None = field(repr=False)
    base_url: str | None


PROVIDER_FIELDS: dict[Provider, tuple[str, str]] = {
    # (the field of its API key, of its base URL)
    "openai": ("openai_api_key", "openai_base_url"),
    "anthropic": ("anthropic_api_key", "anthropic_base_url"),
    "google": ("gemini_api_key", "gemini_base_url"),
}
"""Each provider's fields in ``Settings``."""


class ProviderChoice:
    """What ``Settings`` chooses of the providers: their keys, URLs and models."""

    provider: Provider
    model: str
    transcribe_model: str
    live_model: str
    speech_model: str

    @property
    def provider_key(self) -> str | None:
        """The chosen provider's API key."""
        return cast(str | None, getattr(self, PROVIDER_FIELDS[self.provider][0]))

    @property
    def provider_base_url(self) -> str | None:
        """Where the chosen provider is reached, when not at its SDK's default."""
        return cast(str | None, getattr(self, PROVIDER_FIELDS[self.provider][1]))

    def audio_model(self, purpose: AudioPurpose) -> AudioModel | None:
        """The provider and model of live audio (``live``) or spoken replies (``speech``):
        ``SPARK_LIVE_MODEL`` / ``SPARK_SPEECH_MODEL``, else SPARK_MODEL's provider's
        default; ``None`` when that provider has neither a key nor a base URL (offline),
        or is Anthropic's, which has no audio, and no other is named.

        Raises:
            ConfigurationError: the variable names no provider we know, or Anthropic.
        """
        spec = self.live_model if purpose == "live" else self.speech_model
        defaults = DEFAULT_AUDIO_MODELS[purpose]
        if spec:
            provider, model = parse_model(spec)
            if provider not in defaults:
                variable = "SPARK_LIVE_MODEL" if purpose == "live" else "SPARK_SPEECH_MODEL"
                raise ConfigurationError(
                    f"{variable}={spec!r}: {provider} has no audio; name an openai: or "
                    "google: model."
                )
        elif self.provider in defaults:
            provider, model = self.provider, defaults[self.provider]
        else:
            return None
        key_field, url_field = PROVIDER_FIELDS[provider]
        key, url = getattr(self, key_field), getattr(self, url_field)
        if key is None and url is None:
            return None
        return AudioModel(provider, model, key, url)

    @property
    def offline_model(self) -> bool:
        """The chosen provider has neither a key nor a base URL: use the deterministic
        offline model (a local server may need no key, so a base URL alone will do)."""
        return self.provider_key is None and self.provider_base_url is None

    @property
    def transcription(self) -> tuple[Provider, str]:
        """Who transcribes voice clips, and with which model: ``SPARK_TRANSCRIBE_MODEL``,
        else Gemini's chat model on Gemini and ``gpt-4o-mini-transcribe`` otherwise (on
        Anthropic too, whose models take no audio: it needs the OpenAI key).

        Raises:
            ConfigurationError: it names no provider we know, or Anthropic.
        """
        if not self.transcribe_model:
            if self.provider == "google":
                return "google", self.model
            return "openai", DEFAULT_TRANSCRIBE_MODEL
        try:
            provider, model = parse_model(self.transcribe_model)
        except ConfigurationError as exc:
            raise ConfigurationError(
                str(exc).replace("SPARK_MODEL", "SPARK_TRANSCRIBE_MODEL")
            ) from None
        if provider == "anthropic":
            raise ConfigurationError(
                f"SPARK_TRANSCRIBE_MODEL={self.transcribe_model!r}: Anthropic's models take "
                "no audio; name an openai: or google: model to transcribe voice clips."
            )
        return provider, model

    @property
    def transcription_key(self) -> str | None:
        """The transcribing provider's API key."""
        return cast(str | None, getattr(self, PROVIDER_FIELDS[self.transcription[0]][0]))

    @property
    def transcription_base_url(self) -> str | None:
        """Where the transcribing provider is reached, when not at its SDK's default."""
        return cast(str | None, getattr(self, PROVIDER_FIELDS[self.transcription[0]][1]))
