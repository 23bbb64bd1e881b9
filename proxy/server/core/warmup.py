"""Warm-up step: load the tokenizers the policies name, and the default encodings, once
the server is up, so that no request waits for a load."""

from __future__ import annotations

import logging

from proxy.policy import PolicySet
from proxy.tokens import TokenCounter

log = logging.getLogger("context_proxy.warmup")

# One model per default encoding: o200k_base (gpt-4o and later), cl100k_base (gpt-4,
# gpt-3.5 and every estimated family).
DEFAULT_MODELS = ("gpt-4o", "gpt-4")


def warm_tokenizers(counter: TokenCounter, policies: PolicySet) -> int:
    """Build every tokenizer the policies name (in a worker thread: o200k takes ~0.3 s or
    more). TokenCounter builds under its lock, so a request that needs one while it loads
    waits for that same load instead of starting another. Returns how many were built."""
    built = 0
    wanted = [(model, policies.default) for model in DEFAULT_MODELS]
    wanted += [(model, policy) for policy in policies.all() for model in policy.models]
    for model, policy in wanted:
        try:
            counter.chat_tokenizer(model, policy)
            built += 1
        except Exception as exc:  # a bad tokenizer file: the request path reports it
            log.warning("tokenizer for %s not preloaded: %s", model, type(exc).__name__)
    return built
