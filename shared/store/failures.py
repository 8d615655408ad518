"""A failed call to a Google Cloud store, as the error tree has it (``StoreError``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from google.api_core import exceptions as gexc

from shared.errors import StoreError


@contextmanager
def unavailable(
    message: str, detail: Callable[[gexc.GoogleAPICallError], str] = str
) -> Iterator[None]:
    """Inside, a Google API call that fails raises ``StoreError(message)``, with
    ``detail(error)`` for the log; what the caller catches inside comes first (a lost
    race, a missing object), and errors of ours pass through unchanged."""
    try:
        yield
    except gexc.GoogleAPICallError as exc:
        raise StoreError(message, detail=detail(exc)) from exc
