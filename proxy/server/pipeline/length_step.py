"""Length step: an upstream that refuses a forwarded request as too long (OpenAI's
`context_length_exceeded`, Anthropic's "prompt is too long" with its counts) before a byte
of its answer reached the client. The proxy's count fell short of the upstream's, or the
upstream's window is smaller than the policy says: the request is planned again to the
upstream's own count and window and sent once more, and what the refusal showed is kept
for that upstream and model (an estimated model's factor raised, tokens/calibration.py; an
exact model's window lowered, tokens/counter.py), so that the next request is planned
right the first time. The client sees a length error only when the required parts alone
do not fit (the plan's own refusal), or when the retry is refused too (the upstream's).

Providers say this only in words (Anthropic has no code for it): the words are read here,
and nowhere else.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import orjson

from proxy.policy import Policy
from proxy.server.core.services import Services
from proxy.server.pipeline.dialect import Flight
from proxy.server.pipeline.exchange import MAX_REPORTED_TOKENS, Exchange
from proxy.server.pipeline.rounds import Rounds
from proxy.tokens import ChatTokenizer
from proxy.upstream import UpstreamResponse

log = logging.getLogger("context_proxy.plan")

# Read only where a provider puts them (the start of its message, or an answer with the
# code): an upstream's other errors may quote what the client sent, and what a refusal
# teaches serves every team on that upstream.
_MAXIMUM = re.compile(r"maximum context length is (\d{1,12}) tokens")
# OpenAI's start (vLLM's and DeepSeek's too), OpenRouter's, and vLLM's for an answer's
# limit that leaves the prompt no room ("'max_tokens' ... is too large: K. This model's...").
_OPENAI_START = re.compile(
    r"(?:'max_tokens'(?: or 'max_completion_tokens')? is too large: \d{1,12}\. )?"
    r"This (?:model|endpoint)'s maximum context length is"
)
_IN_MESSAGES = re.compile(r"(\d{1,12}) in the messages")
_IN_FUNCTIONS = re.compile(r"(\d{1,12}) in the functions")
_TEXT_INPUT = re.compile(r"(\d{1,12}) of text input")  # OpenRouter's
# vLLM's: "your request has N input tokens", "your prompt contains (at least) N input
# tokens" (not its "N characters", a count of another unit).
_INPUT = re.compile(r"(?:request has|prompt contains(?: at least)?) (\d{1,12}) input tokens")
_ASKED = re.compile(r"(?:resulted in|requested) (\d{1,12}) tokens")
_TOO_LONG = (  # Anthropic's: the prompt alone, or the prompt and the answer's limit
    re.compile(r"prompt is too long: (\d{1,12}) tokens > (\d{1,12}) maximum"),
    re.compile(
        r"input length and `?max_tokens`? exceed context limit: "
        r"(\d{1,12}) \+ \d{1,12} > (\d{1,12})"
    ),
)
MAX_REFUSAL_BYTES = 64 * 1024  # a refusal is a short JSON error: a longer body is not read as one
UNSAID = 1.25  # how much more an upstream that gave no count of its own is taken to count
MARGIN = 0.05  # planned this much under the upstream's count: a new body's ratio varies
MOST = 2.0  # a retry's count at most this many times the proxy's: an upstream's word is bounded
LEAST_WINDOW = 8  # a window learned is never under the policy's over this
LEAST_UNKNOWN_WINDOW = 512  # nor, for a model the policy gives none, under this


@dataclass(frozen=True, slots=True)
class LengthRefusal:
    """What an upstream said when it refused a request as too long."""

    counted: int | None  # the prompt's tokens, as it counted them
    maximum: int | None  # the most it takes (its window)


def length_refusal(status: int, answer: bytes) -> LengthRefusal | None:
    """The refusal in an upstream's error answer, when it is one for length."""
    if status != 400 or len(answer) > MAX_REFUSAL_BYTES:
        return None
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    message = error.get("message")
    text = message[:2000].lstrip() if isinstance(message, str) else ""
    for pattern in _TOO_LONG:
        found = pattern.match(text)
        if found is not None:
            return LengthRefusal(_count(found[1]), _count(found[2]))
    coded = error.get("code") == "context_length_exceeded"
    if not coded and _OPENAI_START.match(text) is None:
        return None
    maximum = _MAXIMUM.search(text)
    counted: int | None = None
    messages, functions = _IN_MESSAGES.search(text), _IN_FUNCTIONS.search(text)
    prompt = _INPUT.search(text) or _TEXT_INPUT.search(text)
    asked = _ASKED.search(text)
    if messages is not None:  # "(N in the messages, K in the completion)": N is the prompt
        counted = _count(str(int(messages[1]) + (int(functions[1]) if functions else 0)))
    elif prompt is not None:
        counted = _count(prompt[1])
    elif asked is not None:
        counted = _count(asked[1])
    return LengthRefusal(counted, _count(maximum[1]) if maximum is not None else None)


def _count(text: str) -> int | None:
    value = int(text)
    return value if 0 < value <= MAX_REPORTED_TOKENS else None


Replan = Callable[[LengthRefusal], Awaitable[ChatTokenizer]]


async def within_length(
    rounds: Rounds,
    flight: Flight,
    upstream: UpstreamResponse,
    tokenizer: ChatTokenizer,
    replan: Replan,
) -> tuple[UpstreamResponse, bytes | None, ChatTokenizer]:
    """The upstream's answer to the request; when it refused it for length, the request
    planned again (`replan`: its payload made anew) and sent once more, if that changed
    what is sent. Returns the answer, its body when it was read here (a refusal passed
    on), and the tokenizer the request was planned with last."""
    if upstream.status != 400 or flight.outcome is None:
        return upstream, None, tokenizer
    answer = await upstream.read()
    refusal = length_refusal(upstream.status, answer)
    if refusal is None or (flight.outcome.budget is None and refusal.maximum is None):
        return upstream, answer, tokenizer  # not for length; or no window known, none said
    before = flight.payload
    planned = await replan(refusal)  # a plan the required parts alone overflow: its refusal
    if flight.payload == before:  # nothing the proxy can change: the upstream's word stands
        return upstream, answer, tokenizer
    await rounds.admit_retry()
    return await rounds.send(flight.payload, rounds.ex.stream), None, planned


def refit(
    services: Services, ex: Exchange, tokenizer: ChatTokenizer, refusal: LengthRefusal,
    window: int | None,
) -> ChatTokenizer:  # fmt: skip
    """What the retry is planned with, after learning from `refusal`: the tokenizer scaled
    to the upstream's count (an estimated model's factor is learned too); an exact model's
    shortfall, and a window smaller than `window` (the policy's), learned as its window.
    A model whose window is known nowhere (`window` None) takes the one the upstream said."""
    assert ex.outcome is not None
    counted, model, upstream = ex.outcome.tokens_after, ex.model, ex.count_upstream
    configured = window
    said_window = False  # the window it said explains the refusal on its own
    if window is None:  # sent untrimmed, as nothing said its window: now the upstream has
        if refusal.maximum is None:
            return tokenizer
        learn(services, upstream, model, refusal.maximum, None)
        window = services.counter.learned_window(upstream, model) or refusal.maximum
        said_window = counted >= refusal.maximum
    elif refusal.maximum is not None and refusal.maximum < window:
        learn(services, upstream, model, refusal.maximum, window)
        said_window = True
    reported = refusal.counted
    if reported is None and not said_window:  # it said nothing the proxy can read
        reported = math.ceil(counted * UNSAID)
    if reported is None or counted <= 0 or reported <= counted:
        return tokenizer  # its window alone was wrong
    scale = min(reported / counted, MOST) * (1 + MARGIN)
    if not tokenizer.estimated:  # exact counts: the upstream adds what the proxy cannot see
        seen = services.counter.window_at(window, upstream, model)
        learn(services, upstream, model, math.floor(seen / scale), configured)
        return tokenizer
    if ex.countable:
        services.counter.observe_refused(model, counted, tokenizer.factor, reported, upstream)
    factor = math.ceil(tokenizer.factor * scale * 1000) / 1000
    ex.count_factor = factor
    return tokenizer.scaled(factor)


def learn(
    services: Services, upstream: str, model: str, window: int, configured: int | None
) -> None:
    """`upstream`'s window for `model` kept (never under a LEAST_WINDOW-th of the policy's,
    or LEAST_UNKNOWN_WINDOW where the policy has none), and the operator told once per
    model: the policy's is wrong, or missing."""
    if configured is None:
        least = LEAST_UNKNOWN_WINDOW
        if services.counter.learned_window(upstream, model) is None:
            log.warning(
                "the upstream refused a request to model %r as too long: it takes about %d "
                "tokens, and no context window is known for it; planned to that from now on "
                "(set models.<name>.context_window in the policy)",
                model[:128], max(window, least),
            )  # fmt: skip
    else:
        least = max(1, configured // LEAST_WINDOW)
        if services.counter.window_at(configured, upstream, model) == configured:
            log.warning(
                "the upstream refused a request to model %r as too long: it takes about %d "
                "tokens, not the %d configured; planned to that from now on (set "
                "models.<name>.context_window in the policy)",
                model[:128], max(window, least), configured,
            )  # fmt: skip
    services.counter.learn_window(upstream, model, max(window, least))


def retry_policy(policy: Policy) -> Policy:
    """The policy a retry is planned under: the answer's limit taken out of the budget, as
    the upstream's window holds the prompt and the answer together."""
    if policy.budget.reserve_output:
        return policy
    return replace(policy, budget=replace(policy.budget, reserve_output=True))
