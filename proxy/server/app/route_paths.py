"""One spelling per route: a path is read as the router reads it after doubled slashes
are folded, `;parameters` dropped from its segments, and a metered route matched whatever
its letters' case, so that no spelling of a metered route reaches the upstream past its
quota and its usage row (`/v1/chat//completions`, `/v1/Chat/completions;x`)."""

from __future__ import annotations

import re

from proxy.server.routes.passthrough_rules import BILLED

_SLASHES = re.compile(r"/{2,}")
_PARAMS = re.compile(r";[^/]*")


def canonical_path(path: str, metered: frozenset[str]) -> str:
    """`path` folded as the module says; a metered route (or BILLED one) in its own case."""
    folded = _PARAMS.sub("", _SLASHES.sub("/", path)) if ("//" in path or ";" in path) else path
    lowered = folded.lower().rstrip("/")
    if lowered != folded.rstrip("/") and (lowered in metered or lowered in BILLED):
        return lowered
    return folded
