"""Upstream call: aiohttp's request object, with the session's fixed auto-header rule built once."""

from __future__ import annotations

from collections.abc import Iterable

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy, istr

# Headers aiohttp must never add by itself: the proxy forwards the client's User-Agent
# (or none), asks for the answer unencoded only when it needs to read it, and sets its
# own Content-Type.
SKIPPED_NAMES = ("User-Agent", "Accept-Encoding", "Content-Type")
# The session keeps its skip set as a frozenset of istr: equal to this one.
SKIPPED = frozenset(istr(name) for name in SKIPPED_NAMES)
# Read-only: aiohttp only looks names up in it (payload headers, the default content-type).
_SKIPPED_LOOKUP: CIMultiDictProxy[None] = CIMultiDictProxy(
    CIMultiDict((name, None) for name in sorted(SKIPPED))
)


class LeanRequest(aiohttp.ClientRequest):
    """aiohttp's ClientRequest, ~10 µs cheaper per request.

    Given a skip set, aiohttp's update_auto_headers sorts it into a new multidict and
    copies the request's headers with it to see which defaults are missing, on every
    request. The session's set never changes: which defaults it leaves (only Accept) is
    known once, and any other set takes aiohttp's own way.
    """

    # The defaults the skip set leaves (User-Agent, aiohttp's other default, is skipped).
    _ADDED = tuple(
        (name, value)
        for name, value in aiohttp.ClientRequest.DEFAULT_HEADERS.items()
        if name not in SKIPPED
    )

    def update_auto_headers(self, skip_auto_headers: Iterable[str] | None) -> None:
        if skip_auto_headers != SKIPPED:
            super().update_auto_headers(skip_auto_headers)
            return
        # aiohttp types it as a multidict; only `in` is ever used on it.
        self._skip_auto_headers = _SKIPPED_LOOKUP  # type: ignore[assignment]
        headers = self.headers
        for name, value in self._ADDED:
            if name not in headers:
                headers[name] = value
