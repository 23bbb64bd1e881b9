"""Cache mode: cuts that move in steps so the provider's prompt cache keeps working. A chat
is cut at a stable point of its history with a recall after it; an agent loop is planned as
of its last step boundary. Decided here: where the cut falls, how much recall a turn gets,
and where agent loops are told apart from chats for caching."""

from proxy.planner.cache.mode import plan_cached

__all__ = ["plan_cached"]
