"""Request ids: the `x-request-id` of every answer and usage row."""

from __future__ import annotations

import itertools
import os


def new_request_id() -> str:
    # 96 random bits: unique enough for logs, and cheaper than formatting a UUID.
    return "req_" + os.urandom(12).hex()


class RequestIds:
    """Request ids without a syscall each: a random per-process prefix (48 bits) and a
    counter, 24 hex digits like new_request_id's. One per Services, made in each worker."""

    def __init__(self) -> None:
        self._prefix = "req_" + os.urandom(6).hex()
        self._count = itertools.count(int.from_bytes(os.urandom(3)))

    def next(self) -> str:
        return f"{self._prefix}{next(self._count) & 0xFFFFFFFFFFFF:012x}"
