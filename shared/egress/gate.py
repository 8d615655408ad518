"""``Egress``: the one door every provider request leaves by (DESIGN §13).

A chat turn, a task tool's own model calls, transcription, speech and live-session
secrets all go through it, in every process, and it does three things to each:

* **screen** (``screen.py``, where the AI opt-out is decided): what the user's model
  may no longer be sent is worked out afresh from the provenance record and the
  members' settings, and withheld from the request (or the text to be spoken);
* **meter**: every call reserves an estimate of its tokens from the user's day before
  it is made (a run's each step, its head start included, as a task tool's each call)
  and settles what it used after; a reservation has a lease, so a call whose client
  left, whose stream broke or whose process died is still charged;
* **bound**: each kind of call has a size limit, checked before anything is sent,
  and a deadline, after which it fails as a provider that went silent.

Before any of that, a dependent's call is judged on their parents' controls (DESIGN
§16), read with their role afresh at each call (``Roles.standing``): a processor their
parent has not consented to, or quiet hours, refuse it with ``ParentControls`` and no
provider is asked (``controls.py`` holds the rules).

Nothing else holds a provider (``providers.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

from opentelemetry.trace import Tracer

from shared.clock import Clock, SystemClock
from shared.egress import spans
from shared.egress.controls import Processor, chat_processors, refusal
from shared.egress.moderating import (
    Covered,
    ModerationPolicy,
    Roles,
    Standing,
    held,
    judged_reply,
    users_turn,
    verdict_of,
)
from shared.egress.providers import (
    LiveSecret,
    ModelProvider,
    Moderator,
    SecretMinter,
    Speaker,
    Transcriber,
)
from shared.egress.screen import Screen, Screening, Withholding, named_in, screened
from shared.errors import (
    ModerationUnavailable,
    ParentControls,
    PayloadTooLarge,
    ProviderError,
    ProviderSilent,
    RateLimited,
    ToolError,
)
from shared.ids import derived
from shared.llm.base import (
    ChatMessage,
    Finish,
    ImagePart,
    Meter,
    ModelEvent,
    ModelRequest,
    ProviderName,
    TextDelta,
    finished,
)
from shared.llm.moderation import Verdict
from shared.llm.transcribe import Clip, Transcribed, TranscriptionEvent, estimated_usage
from shared.observe.metrics import Metrics
from shared.schemas.documents import Usage

Kind = Literal["chat", "task", "transcription", "speech", "secret", "moderation"]

CHARS_PER_TOKEN = 4
"""Tokens are estimated from characters where a provider reports none (speech) or
before it has (a reservation): about four characters each."""
REPLY_ALLOWANCE = 4_096
"""Tokens reserved for a chat step's reply, which has no bound of its own (a run's
reply may be as long as the model makes it); settled to what it really used."""
TASK_REPLY_TOKENS = 16_384
"""The bound of a task tool's reply that sets none itself (``ModelRequest.max_tokens``;
a lesson of 60,000 characters fits): the provider stops it there, so what is reserved
is what it can cost. A fixed allowance smaller than the replies (4,096, when lessons
took ~10,000) let concurrent drafter calls, each within its reservation at the start,
carry the day to twice its budget."""


@dataclass(frozen=True, slots=True)
class Bound:
    """One kind of call's limits: ``max_chars`` of what is sent (a request's text, a
    clip's bytes), and ``seconds`` from the call to its last event."""

    max_chars: int
    seconds: float


BOUNDS: dict[Kind, Bound] = {
    # A run's history is bounded before (SPARK_HISTORY_CHARS); this is the backstop.
    "chat": Bound(max_chars=2_000_000, seconds=600),
    "task": Bound(max_chars=2_000_000, seconds=300),
    "transcription": Bound(max_chars=25 * 1024 * 1024, seconds=120),
    # OpenAI's speech takes 4,096 characters a request; the adapters cut longer text.
    "speech": Bound(max_chars=200_000, seconds=300),
    "secret": Bound(max_chars=0, seconds=15),
    # A turn's text and its images (as base64); the deadline is SPARK_MODERATION_SECONDS.
    "moderation": Bound(max_chars=60 * 1024 * 1024, seconds=10),
}
MODERATION_IMAGE_TOKENS = 256
"""What an image is reserved as when it is judged (moderators report no usage, and
OpenAI's charges none: the reservation only keeps a flood of calls within the day)."""


class Budget(Protocol):
    """Each user's daily tokens (``shared/budget``'s ``Budget``)."""

    def meter(self, user_id: str, task_id: str | None = None) -> Meter:
        """What one user's calls (one task's, with ``task_id``) reserve and settle with."""
        ...


def request_chars(request: ModelRequest) -> int:
    """How much ``request`` says, in characters (images by their encoded size)."""
    size = len(request.system)
    for turn in request.messages:
        size += len(turn.text) + sum(len(c.arguments) for c in turn.tool_calls)
        size += sum(len(i.data) for i in turn.images)
    return size


def charged(usage: Usage, cached_percent: int = 100) -> int:
    """The tokens a call counts against its user's day: its output, its input, and of
    that the part read from the provider's prompt cache at ``cached_percent`` per cent
    (rounded up), as providers bill it at a fraction of the price (docs/costs.md)."""
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    share = math.ceil(cached * min(max(cached_percent, 0), 100) / 100)
    return usage.input_tokens - cached + share + usage.output_tokens


def _input_estimate(request: ModelRequest) -> int:
    return math.ceil(request_chars(request) / CHARS_PER_TOKEN)


def _estimate(request: ModelRequest) -> int:
    """What ``request`` may cost: its input, estimated from its size, and its reply's
    bound (``REPLY_ALLOWANCE`` without one)."""
    reply = REPLY_ALLOWANCE if request.max_tokens is None else request.max_tokens
    return _input_estimate(request) + reply


async def _unreserved(reserving: asyncio.Future[str], meter: Meter) -> None:
    """Give back a reservation (made or still being made) for a call not made."""
    try:
        reservation = await reserving
    except Exception:
        return  # none was made
    await meter.settle(reservation, 0)


async def _settled(
    stream: AsyncGenerator[ModelEvent, None],
    meter: Meter,
    reservation: str,
    sent: int,
    cached_percent: int,
) -> AsyncGenerator[ModelEvent, None]:
    """``stream``, its reservation settled however it ends: to the usage the provider
    reported (``charged``), else (a stream stopped or broken before its finish) to an estimate of
    what it used: its input, ``sent`` tokens, once anything came back, and the text so
    far. One that never answered is charged nothing, as a provider bills none."""
    used: int | None = None
    answered = 0
    try:
        async with contextlib.aclosing(stream):
            async for event in stream:
                if isinstance(event, Finish):
                    used = charged(event.usage, cached_percent)
                elif isinstance(event, TextDelta):
                    answered += len(event.text) + 1
                else:
                    answered += len(event.arguments) + 1
                yield event
    finally:
        if used is None:
            used = sent + math.ceil(answered / CHARS_PER_TOKEN) if answered else 0
        await meter.settle(reservation, used)


E = TypeVar("E")


async def _within(events: AsyncIterator[E], bound: Bound, what: str) -> AsyncGenerator[E, None]:
    """``events`` until ``bound``'s deadline, judged as each arrives (a provider that
    sends nothing at all is ended by its adapter's read timeout), and closed with the
    generator that reads them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound.seconds
    try:
        async for event in events:
            if loop.time() > deadline:
                raise ProviderSilent(
                    f"{what} took longer than {bound.seconds:.0f} s and was stopped."
                )
            yield event
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


def _cancel(*futures: asyncio.Future[Any] | None) -> None:
    for future in futures:
        if future is not None:
            future.cancel()


async def _now(value: str | None) -> str | None:
    """``value``, as the awaitable ``ModerationPolicy.covered_as`` reads a role from."""
    return value


def _check_size(size: int, bound: Bound, what: str) -> None:
    if size > bound.max_chars:
        raise PayloadTooLarge(f"{what} is too large to send to the model.")


class Egress:
    """Every provider of one process, behind the screen, the meter and the bounds."""

    def __init__(
        self,
        model: ModelProvider,
        screen: Screen,
        budget: Budget,
        *,
        speaker: Speaker | None = None,
        transcriber: Transcriber | None = None,
        minter: SecretMinter | None = None,
        moderator: Moderator | None = None,
        policy: ModerationPolicy | None = None,
        roles: Roles | None = None,
        addendum: str = "",
        bounds: dict[Kind, Bound] | None = None,
        tracer: Tracer | None = None,
        metrics: Metrics | None = None,
        cached_input_percent: int = 100,
        clock: Clock | None = None,
    ) -> None:
        self._model = model
        # What time it is where a dependent's quiet hours are judged.
        self._clock = clock or SystemClock()
        # What share of a token read from the prompt cache the meter counts (``charged``).
        self._cached_percent = cached_input_percent
        self._screen = screen
        self._budget = budget
        self._speaker = speaker
        self._transcriber = transcriber
        self._minter = minter
        self._moderator = moderator
        self._policy = policy or ModerationPolicy()
        self._roles = roles
        # What a dependent's runs are told besides the system prompt (prompts/dependent.md).
        self._addendum = addendum
        self._bounds = {**BOUNDS, **(bounds or {})}
        # None, both: no spans or metrics at all, and no wrapper around a stream
        # (observing off is free).
        self._tracer = tracer
        self._metrics = metrics

    @property
    def _moderated(self) -> bool:
        """Whether anyone's turns are judged (a dependent's chat then needs consent for
        the moderator too: an unjudged turn is not answered)."""
        return self._moderator is not None and self._policy.mode != "off"

    def _refusal(
        self, standing: Standing, processors: Sequence[Processor], at: datetime | None = None
    ) -> ParentControls | None:
        return refusal(standing.controls, processors, at or self._clock.now())

    async def _allowed(self, user_id: str, *processors: Processor) -> None:
        """Refuse a call of ``user_id``'s that their parents' controls forbid, read now.

        Raises:
            ParentControls: they forbid it (nothing is asked of any provider).
        """
        if self._roles is None:
            return
        refused = self._refusal(await self._roles.standing(user_id), processors)
        if refused is not None:
            raise refused

    def _screened(self, withheld: Withholding, kind: Kind) -> None:
        if withheld and self._metrics is not None:
            self._metrics.screen_applied(kind)

    # -- the model -----------------------------------------------------------------

    @property
    def label(self) -> str:
        """The model's name, as a message records it."""
        return self._model.label

    @property
    def provider(self) -> ProviderName:
        """Whose opaque state the model writes and reads back."""
        return self._model.provider

    def screening(self, user_id: str) -> Screening:
        """The screen's read for ``user_id``'s next ``chat``, begun now, beside another
        read the request waits on (``Screening``)."""
        return Screening(self._screen, user_id)

    async def chat(
        self, user_id: str, request: ModelRequest, screening: Screening | None = None
    ) -> AsyncGenerator[ModelEvent, None]:
        """The model's reply to one step of a run, ``request``, sent for ``user_id`` once
        screened (by ``screening``'s read when given, begun for this request; else read
        now) and its tokens reserved from the user's day (in the same wait as the
        screen's read), settled to what it used however its stream ends. The run bounds
        it itself (its history, the provider's silence, its lease).

        Raises:
            RateLimited: today's tokens are spent (nothing is sent).
            StoreError: what the screen must read could not be read (nothing is sent).
            PayloadTooLarge: the request is over the chat size.
            ValueError: ``screening`` is another user's, or was taken already.
            ParentControls: a dependent's parents' controls forbid it (the chat model,
                or the moderator that would judge the turn, not consented to; quiet
                hours): nothing is sent, nor judged.

        A covered user's turn (the request's last message, when it is theirs) is judged
        beside the request (``moderating.held``): its stream then raises
        ``TurnModerated`` for a flagged turn, before anything of the model's, or
        ``ModerationUnavailable`` for a failed verdict that fails closed.
        """
        _check_size(request_chars(request), self._bounds["chat"], "The request")
        standing = (
            None if self._roles is None else asyncio.ensure_future(self._roles.standing(user_id))
        )
        # One moment for both judgements of the controls (whether the turn is judged,
        # whether it is sent): at a quiet hour's end, a turn left unjudged is not sent.
        at = self._clock.now()
        covering = self._covering(standing, at)
        turn = users_turn(request) if covering is not None else None
        # The screen's read, begun now: the moderator is sent the turn as the model is,
        # with what is withheld blanked (it is a provider too).
        named = named_in(request)
        reading = asyncio.ensure_future(
            screening.take(user_id, named)
            if screening is not None
            else self._screen.withheld(user_id, named)
        )
        judging = None
        if covering is not None and turn is not None:
            judging = asyncio.ensure_future(self._judge_turn(user_id, turn, reading, covering))
        meter = self._budget.meter(user_id)
        reserving = asyncio.ensure_future(meter.reserve(_estimate(request), "chat"))
        try:
            withheld = await reading
        except BaseException:
            await _unreserved(reserving, meter)
            _cancel(judging, covering, standing)
            raise
        try:
            reservation = await reserving
        except BaseException:
            _cancel(judging, covering, standing)
            raise
        if standing is not None:
            # A dependent's runs are told who they talk with (read beside the rest).
            try:
                stood = await standing
            except BaseException:
                _cancel(judging, covering)
                await meter.settle(reservation, 0)
                raise
            refused = self._refusal(stood, chat_processors(moderated=self._moderated), at)
            if refused is not None:
                _cancel(judging, covering)
                await meter.settle(reservation, 0)
                raise refused
            if stood.role == "dependent" and self._addendum:
                system = f"{request.system}\n\n{self._addendum}"
                request = dataclasses.replace(request, system=system)
        self._screened(withheld, "chat")
        request = screened(request, withheld)
        call = spans.Call("chat", self.provider, self.label, "chat")
        stream = spans.watched(
            self._model.stream(request), self._tracer, self._metrics, call, bool(withheld)
        )
        if covering is not None:
            judge = functools.partial(self._judge, user_id, images=(), covering=covering)
            stream = judged_reply(stream, judge, covering)
        if judging is not None:
            stream = held(stream, judging, self._policy.helpline)
        sent = _input_estimate(request)
        return _settled(stream, meter, reservation, sent, self._cached_percent)

    async def judge(self, user_id: str, text: str) -> Verdict | None:
        """The moderator's verdict of ``text`` that ``user_id``'s agent would send to
        others (a tool's argument), as the screen lets it leave, when ``user_id`` is
        covered; ``None`` when not, or when the moderator failed and the policy lets them
        go on.

        Raises:
            ModerationUnavailable: it failed, and the user's turns fail closed.
            ParentControls: a dependent's parent has not consented to the moderator (an
                unjudged text is not sent to others), or it is quiet hours.
        """
        if self._roles is None or not self._moderated:
            return None
        stood = await self._roles.standing(user_id)
        refused = self._refusal(stood, ("moderation",))
        if refused is not None:
            raise refused
        covered = await self._policy.covered_as(_now(stood.role))
        if covered is None:
            return None
        # The moderator is a provider too: it is sent the text as the screen lets it leave.
        withheld = await self._screen.withheld(user_id)
        verdict = self.moderate(user_id, withheld.text(text))
        return await verdict_of(verdict, self._policy, covered)

    def _covering(
        self, standing: asyncio.Future[Standing] | None, at: datetime
    ) -> asyncio.Future[Covered | None] | None:
        """Whether the user whose standing ``standing`` reads is moderated (``None``: no
        one is, or there is no moderator), their controls judged ``at``."""
        if standing is None or not self._moderated:
            return None
        return asyncio.ensure_future(self._covered(standing, at))

    async def _covered(self, standing: asyncio.Future[Standing], at: datetime) -> Covered | None:
        """As whom the user is judged; not at all when their parents' controls forbid
        the chat (the moderator is not consented to, quiet hours): ``chat`` refuses it,
        and nothing of theirs may reach the moderator meanwhile."""
        stood = await standing
        if self._refusal(stood, chat_processors(moderated=True), at) is not None:
            return None
        return await self._policy.covered_as(_now(stood.role))

    async def _judge_turn(
        self,
        user_id: str,
        turn: ChatMessage,
        reading: asyncio.Future[Withholding],
        covering: asyncio.Future[Covered | None],
    ) -> Verdict | None:
        """The verdict of the user's ``turn`` as the screen lets it leave (``reading``:
        what is withheld from ``user_id``'s model, read for this request)."""
        withheld = await asyncio.shield(reading)
        return await self._judge(user_id, withheld.text(turn.text), turn.images, covering)

    async def _judge(
        self,
        user_id: str,
        text: str,
        images: Sequence[ImagePart],
        covering: asyncio.Future[Covered | None],
    ) -> Verdict | None:
        """The verdict of ``text`` and ``images`` when ``user_id`` is covered (``None``
        when not, or when the moderator failed and the policy lets them go on)."""
        covered = await covering
        if covered is None:
            return None
        return await verdict_of(self.moderate(user_id, text, images), self._policy, covered)

    async def _metered(
        self, user_id: str, request: ModelRequest, meter: Meter | None
    ) -> AsyncGenerator[ModelEvent, None]:
        bound = self._bounds["task"]
        await self._allowed(user_id, "chat")
        withheld = await self._screen.withheld(user_id, named_in(request))
        self._screened(withheld, "task")
        request = screened(request, withheld)
        _check_size(request_chars(request), bound, "The request")
        if request.cache_key is None:  # a user's task calls share their prompts' prefixes
            request = dataclasses.replace(request, cache_key=derived("cache", user_id, "task"))
        if request.max_tokens is None:  # bounded, so that its reservation holds it
            request = dataclasses.replace(request, max_tokens=TASK_REPLY_TOKENS)
        meter = meter or self._budget.meter(user_id)
        estimate = _estimate(request)
        reservation = await meter.reserve(estimate, "task")
        used = estimate  # a call that does not finish is charged what was set aside
        call = spans.Call("text_completion", self.provider, self.label, "task")
        stream = spans.watched(
            self._model.stream(request), self._tracer, self._metrics, call, bool(withheld)
        )
        try:
            async for event in _within(stream, bound, "The reply"):
                if isinstance(event, Finish):
                    used = charged(event.usage, self._cached_percent)
                yield event
        finally:
            await meter.settle(reservation, used)

    async def complete(
        self, user_id: str, request: ModelRequest, what: str, meter: Meter | None = None
    ) -> str:
        """The whole text of a reply that no one watches stream (a tool drafting
        content), sent for ``user_id`` once screened, metered (with ``meter``, else the
        user's day) and bounded as a ``task`` call.

        Raises:
            ToolError: the user's tokens for today are spent (the call was not made).
            ParentControls: a dependent's parents' controls forbid the chat model.
            IncompleteResponse, ContentFiltered: the reply is not usable.
            ProviderError: the provider failed.
        """
        parts: list[str] = []
        finish: Finish | None = None
        try:
            async for event in self._metered(user_id, request, meter):
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                elif isinstance(event, Finish):
                    finish = event
        except RateLimited as exc:
            raise ToolError(exc.message) from None
        finished(finish, what)
        return "".join(parts)

    # -- speech --------------------------------------------------------------------

    @property
    def speaker(self) -> tuple[str, str] | None:
        """The speech model's voice key and media type, or ``None`` without one."""
        if self._speaker is None:
            return None
        return self._speaker.voice_key, self._speaker.media_type

    def speak(self, user_id: str, text: str) -> AsyncGenerator[bytes, None]:
        """``text`` read aloud for ``user_id``, screened first; its tokens (estimated
        from the text, as speech models report none) are reserved before the provider
        is asked and charged however the stream ends.

        Raises:
            RateLimited: today's tokens are spent (nothing is asked).
            ParentControls: a dependent's parents' controls forbid speech (nothing is
                asked).
            PayloadTooLarge, ProviderSilent, ProviderError: as ``stream``.
        """
        return self._speak(user_id, text)

    async def _speak(self, user_id: str, text: str) -> AsyncGenerator[bytes, None]:
        speaker = self._speaker
        if speaker is None:
            raise ValueError("no speech model")  # callers ask ``speaker`` first
        bound = self._bounds["speech"]
        await self._allowed(user_id, "speech")
        withheld = await self._screen.withheld(user_id)
        self._screened(withheld, "speech")
        text = withheld.text(text)
        _check_size(len(text), bound, "The text to read aloud")
        tokens = math.ceil(len(text) / CHARS_PER_TOKEN)
        meter = self._budget.meter(user_id)
        reservation = await meter.reserve(tokens, "speech")
        provider, _, model = speaker.voice_key.partition(":")
        call = spans.Call("speech", provider, model, "speech")
        audio = spans.watched(speaker.speak(text), self._tracer, self._metrics, call)
        try:
            async for chunk in _within(audio, bound, "Reading aloud"):
                yield chunk
        finally:
            await meter.settle(reservation, tokens)

    # -- transcription -------------------------------------------------------------

    @property
    def transcribes(self) -> bool:
        return self._transcriber is not None

    def transcribe(
        self, user_id: str, clip: Clip, meter: Meter | None = None
    ) -> AsyncGenerator[TranscriptionEvent, None]:
        """What ``clip`` says, for ``user_id``: its tokens (estimated from its length)
        reserved before, settled to what the provider reported after. The user's own
        voice is theirs: nothing in it is screened.

        Raises:
            RateLimited: today's tokens are spent (nothing is asked).
            ParentControls: a dependent's parents' controls forbid transcription
                (nothing is asked).
            PayloadTooLarge, ProviderSilent, ProviderError: as ``stream``.
        """
        return self._transcribe(user_id, clip, meter)

    async def _transcribe(
        self, user_id: str, clip: Clip, meter: Meter | None
    ) -> AsyncGenerator[TranscriptionEvent, None]:
        transcriber = self._transcriber
        if transcriber is None:
            raise ValueError("no transcription model")  # callers ask ``transcribes``
        bound = self._bounds["transcription"]
        _check_size(len(clip.data), bound, "The voice clip")
        await self._allowed(user_id, "transcription")
        meter = meter or self._budget.meter(user_id)
        estimated = estimated_usage(clip.duration_seconds)
        used = estimated.input_tokens + estimated.output_tokens
        reservation = await meter.reserve(used, "transcription")
        call = spans.Call("transcription", self.provider, transcriber.label, "transcription")
        heard = spans.watched(transcriber.transcribe(clip), self._tracer, self._metrics, call)
        try:
            async for event in _within(heard, bound, "Transcribing"):
                if isinstance(event, Transcribed) and event.usage.input_tokens:
                    used = event.usage.input_tokens + event.usage.output_tokens
                yield event
        finally:
            await meter.settle(reservation, used)

    # -- moderation ------------------------------------------------------------------

    @property
    def moderator(self) -> str | None:
        """Whose moderator judges (the processor a parent consents to), or ``None``."""
        return None if self._moderator is None else self._moderator.provider

    async def moderate(
        self, user_id: str, text: str, images: Sequence[ImagePart] = (), meter: Meter | None = None
    ) -> Verdict:
        """The moderator's verdict of ``text`` and ``images`` for ``user_id`` (DESIGN
        §16): its tokens reserved (estimated from the text and a fixed share an image)
        and charged, within the ``moderation`` bound. Nothing is screened: a user's
        own words, and their model's reply to them, are what is judged.

        Raises:
            RateLimited: today's tokens are spent (nothing is asked).
            PayloadTooLarge: what is to be judged is over the bound.
            ModerationUnavailable: the moderator failed or did not answer in time (the
                caller applies ``SPARK_MODERATION_FAIL``).
        """
        moderator = self._moderator
        if moderator is None:
            raise ValueError("no moderator")  # callers ask ``moderator`` first
        bound = self._bounds["moderation"]
        _check_size(len(text) + sum(len(i.data) for i in images), bound, "The message")
        tokens = math.ceil(len(text) / CHARS_PER_TOKEN) + MODERATION_IMAGE_TOKENS * len(images)
        meter = meter or self._budget.meter(user_id)
        reservation = await meter.reserve(max(tokens, 1), "moderation")
        call = spans.Call("moderation", moderator.provider, moderator.label, "moderation")
        try:
            async with asyncio.timeout(bound.seconds):
                return await spans.judged(
                    moderator.judge(text, images), self._tracer, self._metrics, call
                )
        except TimeoutError:
            raise ModerationUnavailable(
                "Spark AI Agent could not check this message in time; please try again.",
                detail=f"the moderator took longer than {bound.seconds:.0f} s",
            ) from None
        except ProviderError as exc:
            raise ModerationUnavailable(
                "Spark AI Agent could not check this message just now; please try again.",
                detail=f"{exc.code}: {exc.detail}",
            ) from exc
        finally:
            await meter.settle(reservation, tokens)

    # -- live-session secrets --------------------------------------------------------

    @property
    def minter(self) -> tuple[str, str] | None:
        """The live model's provider and name, or ``None`` without one."""
        if self._minter is None:
            return None
        return self._minter.provider, self._minter.live_model

    async def mint(self, user_id: str, opens_within: timedelta, lasts: timedelta) -> LiveSecret:
        """A live-session secret for ``user_id`` (sessions are counted by the caller's
        allowance; the secret carries no text to screen), within its deadline.

        Raises:
            ParentControls: a dependent's parents' controls forbid transcription (a
                live session hears them).
            ProviderSilent: the provider did not answer in time.
            ProviderError: it did not mint one.
        """
        minter = self._minter
        if minter is None:
            raise ValueError("no live model")  # callers ask ``minter`` first
        await self._allowed(user_id, "transcription")
        seconds = self._bounds["secret"].seconds
        try:
            async with asyncio.timeout(seconds):
                return await minter.mint(opens_within, lasts)
        except TimeoutError:
            raise ProviderSilent(f"The live session took longer than {seconds:.0f} s.") from None
