"""Cache mode: an agent loop planned as of its last step boundary, a conversation cut at a
stable point; which of the two a request over its budget gets."""

from __future__ import annotations

from proxy.planner.cache.agent import is_agent_loop, plan_anchored
from proxy.planner.cache.chat import plan_stable
from proxy.planner.cache.plan_at import PlanAt
from proxy.planner.parts import Counted, Run
from proxy.planner.report import PlanOutcome


def plan_cached(run: Run, counted: Counted, plan_at: PlanAt) -> PlanOutcome | None:
    """The outcome in cache mode; None when the request has nothing to cut this way (then
    the ordinary planner decides: also a conversation, unless `cache.chats` says so or
    the client caches its prompt: an OpenAI `prompt_cache_key`, Anthropic cache points)."""
    if is_agent_loop(counted.layout, counted.full):
        return plan_anchored(run, counted, plan_at)
    if not (run.policy.cache.chats or run.body.get("prompt_cache_key")):
        return None  # planned per request, unless the client caches its prompt
    return plan_stable(run, counted, plan_at)
