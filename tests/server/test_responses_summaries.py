"""Proxy-made summaries for a Responses conversation: made as chat completions at the same
upstream, then inserted into the next turn as message items."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from proxy.planner.request import SUMMARY_PREFIX
from tests.fake_upstream import FakeUpstream
from tests.summaries.test_summaries_e2e import (  # launch: the fixture serving a proxy
    USER_KEY,
    conversation,
    launch,
    next_turn,
    policy_text,
    wait_for,
)

__all__ = ["launch"]


def as_responses(messages: list[dict[str, Any]]) -> dict[str, Any]:
    system, *rest = messages
    return {"model": "gpt-4o", "instructions": system["content"], "input": rest}


def test_summaries_come_back_as_message_items(
    launch: Any, upstream: FakeUpstream, tmp_path: Path
) -> None:
    with launch(policy_text(tmp_path / "s.db")) as proxy:
        messages = conversation()

        def send(body: dict[str, Any]) -> httpx.Response:
            headers = {"authorization": USER_KEY}
            return httpx.post(proxy.url + "/v1/responses", json=body, headers=headers, timeout=20)

        first = send(as_responses(messages))
        assert first.status_code == 200 and int(first.headers["x-context-trimmed"]) > 0
        wait_for(lambda: proxy.summarizer.stats["made"] >= 1, "a summary to be stored")
        call = upstream.summary_requests[0]
        assert call.path == "/v1/chat/completions"
        assert call.headers["authorization"] == USER_KEY
        second = send(as_responses(next_turn(messages)))
        assert second.status_code == 200
        sent = upstream.responses_requests[-1].json()
        made = [
            i
            for i in sent["input"]
            if i.get("type") == "message" and str(i.get("content")).startswith(SUMMARY_PREFIX)
        ]
        assert made and made[0]["role"] == "system"
        assert made[0]["content"] == SUMMARY_PREFIX + upstream.summary_reply
        assert sent["instructions"] == messages[0]["content"]
        assert sent["input"][-1] == next_turn(messages)[-1]
