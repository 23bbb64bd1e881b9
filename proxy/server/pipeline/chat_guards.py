"""Guard step: bounds on the names a client chooses, and an OpenAI-shaped 500 for a bug."""

from __future__ import annotations

import logging
from typing import Any

from proxy.errors import InvalidRequest, PlanFailed

# No provider names a model in more than a few dozen characters; a longer name is refused
# before it can reach a log, a metric label, the usage log or a per-model cache.
MAX_MODEL_CHARS = 256

log = logging.getLogger("context_proxy.requests")


def checked_model(body: dict[str, Any]) -> str:
    """The body's model name (parse_chat_body made sure it is a string), refused when it
    is longer than any real model's."""
    model: str = body["model"]
    if len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest(
            f"The model name is longer than {MAX_MODEL_CHARS} characters.", param="model"
        )
    return model


def internal_error(exc: Exception, request_id: str) -> PlanFailed:
    """A 500 in OpenAI's shape for an unexpected failure, logged by type and place only
    (an exception's message may quote the request)."""
    log.error("request %s failed: %s", request_id, type(exc).__name__)
    failure = PlanFailed("The proxy failed to handle this request; the failure is logged.")
    failure.code = "internal_error"
    return failure
