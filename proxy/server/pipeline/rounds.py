"""Rounds: the upstream requests one client request makes after its first (a retry after a
length refusal, the continuations of a recall), each counted for requests and tokens a
minute and held against hard quotas as the request was; and what the finished rounds
reported, summed into the request's usage as each one ends, so that a client that leaves
during a later round is still booked what the upstream served it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.errors import ProxyError, UpstreamUnreachable
from proxy.server.core.services import Services
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.quota_step import expected_use, hold_round
from proxy.server.pipeline.rate_step import count_request, take_tokens
from proxy.summaries import SummaryTarget
from proxy.upstream import UpstreamResponse


@dataclass(slots=True)
class Rounds:
    """One request's upstream rounds: where they go, what they used. Each holds the answer
    limit of the request (`body`, the client's): its own, or the policy's default hold."""

    services: Services
    ex: Exchange
    target: SummaryTarget
    body: dict[str, Any]
    usage_of: Callable[[Any], Any]  # the API's usage in the names the exchange reads
    usage: Any = None  # the finished rounds' usage, summed, in the API's own shape

    def used(self, summed: Any) -> None:
        """What every round so far used, as the upstream reported it (summed): the
        request's usage from now on, whatever becomes of the rounds after."""
        if summed is None:
            return
        self.usage = summed
        self.ex.take_usage(self.usage_of(summed))

    async def admit(self, prompt: int) -> None:
        """A later round, of `prompt` tokens, counted as a request a minute, held against
        the team's hard quotas here and in the fleet, its tokens taken from its tokens a
        minute; a QuotaExceeded or RateLimited when one of them refuses it."""
        assert self.ex.policy is not None
        use = expected_use(prompt, self.body, self.ex.policy.quotas.answer_hold_tokens)
        await count_request(self.services, self.ex, self.ex.rate_key)
        await hold_round(self.services, self.ex, use)
        await take_tokens(self.services, self.ex, use)

    async def admit_retry(self) -> None:
        """The request sent again (refused for length): one more request a minute; its
        hold and tokens are the request's own, which the refused one never used."""
        await count_request(self.services, self.ex, self.ex.rate_key)

    async def send(self, payload: bytes, stream: bool) -> UpstreamResponse:
        """A later round sent. One the upstream could not be reached for (a pooled
        connection it closed while the proxy served the round before, most often) is sent
        once more: nothing of it was served."""
        target, upstream = self.target, self.services.upstream
        try:
            return await upstream.send(
                "POST", target.url, target.headers, payload, target.timeouts, stream
            )
        except UpstreamUnreachable:
            return await upstream.send(
                "POST", target.url, target.headers, payload, target.timeouts, stream
            )

    def ended(self) -> None:
        self.ex.upstream_ended = time.perf_counter()


def round_failed(status: int) -> ProxyError:
    """What a stream says when the upstream answers a later round with an error status:
    the answer the client was getting cannot go on."""
    return UpstreamUnreachable(
        f"The upstream answered a continuation of this answer with status {status}.",
        code=f"upstream_{status}",
    )
