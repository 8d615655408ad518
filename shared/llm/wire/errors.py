"""The client's errors: a request that failed, by its transport or with an error status
(the adapters make them ours, the transport httpx2's)."""

from __future__ import annotations


class WireError(Exception):
    """A provider request that failed (the adapter makes it one of ours)."""


class WireTransportError(WireError):
    """The connection could not be made, or broke, or went silent too long."""


class WireConnectError(WireTransportError):
    """No connection to the origin (or through its proxy) could be made."""


class WireTimeout(WireTransportError):
    """Nothing arrived for the read timeout, or the connection took too long to open."""


class WireConnectTimeout(WireTimeout, WireConnectError):
    """The connection took longer than the connect timeout to open."""


class WireStatusError(WireError):
    """The provider answered with an error status; ``message`` is what it said."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
