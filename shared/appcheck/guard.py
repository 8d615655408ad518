"""What the edge asks of App Check for each request, in the mode ``SPARK_APP_CHECK``
sets:

* ``off`` (the default): nothing; the header is not read.
* ``monitor``: every token is verified (and a costly call's consumed), and each
  verdict is logged and counted (``spark.app_check.verdicts``), but every request goes
  on: an operator sees how many calls would be refused before refusing them.
* ``enforce``: a request without a valid token is refused with 401 and its own code
  (``app_check_refused``); a costly call whose token was already spent with
  ``app_check_replayed``, so the app knows to fetch a fresh limited-use token.

The edge calls ``admit`` once per request, saying whether the call costs money (a
new run or one started again by an answer, an approval or a tool's result, speech, a
voice session: their tokens are limited-use and consumed).
"""

from __future__ import annotations

import logging
from typing import Literal, get_args

from shared.appcheck.replays import SpentTokens
from shared.appcheck.verifier import (
    GOOGLE_JWKS,
    AppCheckVerifier,
    Reason,
    Rejected,
    app_check_keys,
)
from shared.config import Settings
from shared.errors import AuthUnavailable, ConfigurationError, StoreError, Unauthenticated
from shared.observe.metrics import Metrics
from shared.observe.metrics import metrics as process_metrics

log = logging.getLogger(__name__)

Mode = Literal["off", "monitor", "enforce"]
MODES: tuple[Mode, ...] = get_args(Mode)
HEADER = "X-Firebase-AppCheck"


class AppCheckRefused(Unauthenticated):
    """The request came without a valid App Check token (``enforce``)."""

    code = "app_check_refused"


class AppCheckReplayed(AppCheckRefused):
    """A costly call's limited-use App Check token was already spent (``enforce``)."""

    code = "app_check_replayed"


_MESSAGES: dict[Reason, str] = {
    "missing": f"This call needs an App Check token: send '{HEADER}: <token>' from the app.",
    "invalid": "The App Check token is not valid for Spark AI Agent.",
    "expired": "The App Check token has expired; get a fresh one and try again.",
    "replayed": "The App Check token was already used; get a fresh limited-use one.",
}


def mode_of(settings: Settings) -> Mode:
    """``SPARK_APP_CHECK``'s mode.

    Raises:
        ConfigurationError: it names no mode, or checks tokens without
            ``SPARK_PROJECT_NUMBER`` (their issuer and audience name it).
    """
    chosen = settings.app_check.lower()
    for mode in MODES:
        if chosen == mode:
            if mode != "off" and not settings.project_number:
                raise ConfigurationError(
                    f"SPARK_APP_CHECK={mode} needs SPARK_PROJECT_NUMBER, the project's "
                    "number (App Check tokens name it)."
                )
            return mode
    raise ConfigurationError(
        f"SPARK_APP_CHECK must be one of {', '.join(MODES)}, not {settings.app_check!r}."
    )


class AppCheck:
    """App Check at the api's door (see the module)."""

    def __init__(
        self,
        mode: Mode,
        verifier: AppCheckVerifier | None,
        spent: SpentTokens,
        metrics: Metrics | None = None,
    ) -> None:
        if mode != "off" and verifier is None:
            raise ValueError("a mode that checks tokens needs a verifier")
        self.mode = mode
        self._verifier = verifier
        self._spent = spent
        self._metrics = metrics or process_metrics

    async def admit(self, token: str | None, *, costly: bool) -> None:
        """Let the request with App Check ``token`` (the header's value, ``None``
        without one) through, or refuse it (``enforce`` only). ``costly``: the call
        spends money, so its token is consumed and works once.

        Raises:
            AppCheckRefused: enforced, and the token is missing, invalid or expired.
            AppCheckReplayed: enforced, costly, and the token was already spent.
            AuthUnavailable, StoreError: enforced, and the keys or the record of
                spent tokens could not be reached (503: the caller may try again).
        """
        if self.mode == "off":
            return
        try:
            verdict = await self._verdict(token, costly)
        except (AuthUnavailable, StoreError) as exc:
            self._metrics.app_check(self.mode, "unavailable")
            log.warning("App Check (%s) could not verify a token: %s", self.mode, exc.code)
            if self.mode == "enforce":
                raise
            return
        self._metrics.app_check(self.mode, verdict)
        if verdict == "valid":
            return
        # The verdict alone: a token is a credential, never logged.
        log.warning("App Check (%s): %s token%s", self.mode, verdict, " (costly)" * costly)
        if self.mode == "enforce":
            error = AppCheckReplayed if verdict == "replayed" else AppCheckRefused
            raise error(_MESSAGES[verdict])

    async def _verdict(self, token: str | None, costly: bool) -> Reason | Literal["valid"]:
        if not token or not token.strip():
            return "missing"
        assert self._verifier is not None  # __init__ requires one unless off
        try:
            verified = await self._verifier.verify(token.strip())
        except Rejected as rejected:
            return rejected.reason
        if costly and not await self._spent.consume(verified.token_id, verified.expires_at):
            return "replayed"
        return "valid"


def app_check(settings: Settings, spent: SpentTokens, metrics: Metrics | None = None) -> AppCheck:
    """The App Check ``settings`` ask for, recording spent tokens in ``spent``.

    Raises:
        ConfigurationError: as ``mode_of``.
    """
    mode = mode_of(settings)
    if mode == "off":
        return AppCheck("off", None, spent, metrics)
    keys = app_check_keys(settings.app_check_jwks_url or GOOGLE_JWKS)
    verifier = AppCheckVerifier(settings.project_number or "", settings.project_id, keys)
    return AppCheck(mode, verifier, spent, metrics)
