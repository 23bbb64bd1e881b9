"""The planner inside a LiteLLM proxy: a pre-call hook that fits every chat-completion and
Responses request to its budget, with this project's policies, before LiteLLM calls the
model. Name it in LiteLLM's config (`litellm_settings: {callbacks: ...}`, see
examples/litellm/).

The policy is the one of LiteLLM's team (`team_alias`, then `team_id`) or key alias, else
the default policy; the window the policy's, else litellm's model map (the same bundled
data the proxy reads). The plan is the proxy's own (`plan_request`, the same bytes the
proxy would forward); a request whose required parts cannot fit is refused with LiteLLM's
own 400 for a context window exceeded. The plan's figures go into the request's metadata
(`spend_logs_metadata`, which LiteLLM's spend logs and callbacks carry) and, with
`usage_log`, the proxy's own usage rows are written once LiteLLM has the answer. Streaming
is untouched. A large plan runs in a worker thread, off LiteLLM's event loop.

Only this module imports litellm; the planner never does.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from pathlib import Path
from typing import Any

from litellm.exceptions import ContextWindowExceededError
from litellm.integrations.custom_logger import CustomLogger

from proxy.errors import ContextLengthExceeded
from proxy.items import is_responses_body, to_chat, to_responses
from proxy.planner import PlanOutcome, plan_request
from proxy.policy import Policy, PolicySet, load_policy_dir
from proxy.tokens import ContextWindows, TokenCounter
from proxy.usage import UsageRecord

CHAT_CALLS = frozenset(("completion", "acompletion"))
RESPONSES_CALLS = frozenset(("responses", "aresponses"))
# What LiteLLM puts into `data` beside the request itself: never part of what is planned.
_LITELLM_KEYS = frozenset(("metadata", "litellm_metadata", "proxy_server_request", "secret_fields"))


class ContextProxyHook(CustomLogger):
    """LiteLLM's `async_pre_call_hook`, planned with the policies in `policies`."""

    def __init__(
        self, policies: str | Path = "policies", usage_log: str | Path | None = None
    ) -> None:
        super().__init__()
        self.policies: PolicySet = load_policy_dir(Path(policies))
        self.counter = TokenCounter()
        self.windows = ContextWindows()
        self.usage_log = Path(usage_log) if usage_log else None  # the proxy's rows, if named
        # One plan at a time per event loop (a lock belongs to the loop it first waits on).
        self._plan_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]
        self._plan_slots = weakref.WeakKeyDictionary()

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        if self.usage_log is not None:
            await asyncio.to_thread(
                append_row, self.usage_log, usage_row(kwargs, response_obj, 200, None)
            )

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        if self.usage_log is not None:
            error = kwargs.get("exception") if isinstance(kwargs, dict) else None
            status = getattr(error, "status_code", 500)
            row = usage_row(
                kwargs, None, status if isinstance(status, int) else 500, type(error).__name__
            )
            await asyncio.to_thread(append_row, self.usage_log, row)

    def policy_for(self, user_api_key_dict: Any) -> Policy:
        """The policy of LiteLLM's team or key, by name; else the default."""
        for attribute in ("team_alias", "team_id", "key_alias"):
            name = getattr(user_api_key_dict, attribute, None)
            if isinstance(name, str) and name:
                found = self.policies.by_team(name)
                if found.team == name:
                    return found
        return self.policies.default

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        if call_type not in CHAT_CALLS | RESPONSES_CALLS or not isinstance(data.get("model"), str):
            return data
        policy = self.policy_for(user_api_key_dict)
        body = {k: v for k, v in data.items() if k not in _LITELLM_KEYS}
        # Always in a worker thread, one plan at a time: on LiteLLM's event loop a 256 KB
        # body stalled every call in flight for ~0.1 s, and measuring a body's size to
        # choose costs a walk of it too. The hop is ~0.5 ms.
        loop = asyncio.get_running_loop()
        async with self._plan_slots.setdefault(loop, asyncio.Lock()):
            planned = await asyncio.to_thread(self.plan, body, policy)
        if planned is None:
            return data
        new_body, outcome = planned
        out = {**data, **{k: v for k, v in new_body.items() if k in body}}
        for gone in set(body) - set(new_body):
            out.pop(gone, None)
        metadata = dict(out.get("metadata") or {})
        figures = figures_of(outcome, policy)
        metadata["context_proxy"] = figures
        spend = dict(metadata.get("spend_logs_metadata") or {})
        spend["context_proxy"] = figures
        metadata["spend_logs_metadata"] = spend
        out["metadata"] = metadata
        return out

    def plan(
        self, body: dict[str, Any], policy: Policy
    ) -> tuple[dict[str, Any], PlanOutcome] | None:
        """The body to send and its plan; None for a body that is neither chat nor
        Responses. Raises LiteLLM's ContextWindowExceededError for a refused request."""
        model = body["model"]
        tokenizer = self.counter.chat_tokenizer(model, policy)
        window = self.windows.lookup(model, policy)
        responses = is_responses_body(body)
        if not responses and not isinstance(body.get("messages"), list):
            return None
        conv = to_chat(body) if responses else None
        chat = conv.body if conv is not None else body
        try:
            outcome = plan_request(chat, policy, tokenizer, window)
        except ContextLengthExceeded as exc:
            raise ContextWindowExceededError(
                message=exc.message, model=model, llm_provider="context-proxy"
            ) from None
        if conv is not None:
            sent = to_responses(body, conv, outcome.body["messages"]) if outcome.changed else body
            return sent, outcome
        return outcome.body, outcome


def figures_of(outcome: PlanOutcome, policy: Policy) -> dict[str, Any]:
    """The plan's numbers (never content): what the proxy's usage rows carry."""
    return {
        "policy": policy.name,
        "team": policy.team,
        "context_window": outcome.context_window,
        "budget": outcome.budget,
        "tokens_before": outcome.tokens_before,
        "tokens_after": outcome.tokens_after,
        "dropped": outcome.dropped,
        "truncated": outcome.truncated,
        "deduped": outcome.deduped,
        "trimmed": outcome.trimmed,
    }


def usage_row(kwargs: Any, response: Any, status: int, error: str | None) -> UsageRecord:
    """The proxy's usage row for a call LiteLLM made: the plan's figures from the request's
    metadata, the tokens from LiteLLM's response."""
    params = kwargs.get("litellm_params") if isinstance(kwargs, dict) else None
    metadata = (params or {}).get("metadata") or {}
    figures = metadata.get("context_proxy") if isinstance(metadata, dict) else None
    plan = figures if isinstance(figures, dict) else {}
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None) or getattr(usage, "input_tokens", None) or 0
    completion = (
        getattr(usage, "completion_tokens", None) or getattr(usage, "output_tokens", None) or 0
    )
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    api = "responses" if kwargs.get("call_type") in RESPONSES_CALLS else "chat"
    return UsageRecord(
        team=str(plan.get("team", "default")), model=str(kwargs.get("model") or "")[:200],
        status=status, stream=kwargs.get("stream") is True,
        context_window=plan.get("context_window"), budget=plan.get("budget"),
        tokens_before=int(plan.get("tokens_before", 0)),
        tokens_after=int(plan.get("tokens_after", 0)),
        dropped=int(plan.get("dropped", 0)), truncated=int(plan.get("truncated", 0)),
        deduped=int(plan.get("deduped", 0)), prompt_tokens=int(prompt),
        completion_tokens=int(completion), total_tokens=int(prompt) + int(completion),
        usage_source="upstream" if usage is not None else "estimated", error=error, kind=api,
        policy=str(plan.get("policy", "default")),
        cached_tokens=cached if isinstance(cached, int) else None, api=api,
    )  # fmt: skip


def append_row(path: Path, record: UsageRecord) -> None:
    """One whole line, appended in one write (O_APPEND): never half a row beside another
    process's."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, record.to_json_line())
    finally:
        os.close(fd)
