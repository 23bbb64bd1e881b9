"""An estimated model's count (Claude's) is calibrated per team upstream, from answers
whose cost is all in the text, within a band around the family's factor: no request one
team sends, and no report an upstream makes, moves another team's counts, or any team's
past the band."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.policy.model import Policy, hash_key
from proxy.tokens import TokenCounter
from proxy.tokens.calibration import BAND
from tests.conftest import RunningProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

MODEL = "claude-sonnet-4-6"
KEYS = {"a": "cp-team-a", "b": "cp-team-b"}
PROSE = "The invoice totals are rounded half to even before tax is applied. " * 220


@pytest.fixture
def two_teams(
    start_proxy: Any, policies_dir: Path, fake_upstream_server: tuple[FakeUpstream, str]
) -> RunningProxy:
    """Teams a and b, each with its own Anthropic upstream (the same fake, by two names)."""
    fake, url = fake_upstream_server
    fake.reset()
    hosts = {"a": url, "b": url.replace("127.0.0.1", "localhost")}
    for team, key in KEYS.items():
        (policies_dir / f"{team}.yaml").write_text(
            f'team: {team}\nkeys: ["{hash_key(key)}"]\n'
            f"upstream: {{anthropic: {{base_url: '{hosts[team]}'}}}}\n"
        )
    return start_proxy()  # type: ignore[no-any-return]


def send(proxy: RunningProxy, team: str, content: Any, **headers: str) -> httpx.Response:
    body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": content}]}
    return httpx.post(
        proxy.url + "/v1/messages", json=body, timeout=30,
        headers={"x-api-key": KEYS[team], "anthropic-version": "2023-06-01", **headers},
    )  # fmt: skip


def counted(proxy: RunningProxy, team: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROSE}]}
    r = httpx.post(
        proxy.url + "/v1/messages/count_tokens", json=body,
        headers={"x-api-key": KEYS[team], "anthropic-version": "2023-06-01"},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    return int(r.json()["input_tokens"])


def raw_tokens() -> int:
    return TokenCounter().chat_tokenizer("gpt-4", Policy()).count_text(PROSE)


def test_documents_the_provider_fetches_do_not_calibrate_anyones_count(
    two_teams: RunningProxy,
) -> None:
    """Three tiny requests holding a PDF by URL (billed as 60,000 tokens the body does not
    hold): the counts stay where they were, and an ordinary long prompt still goes."""
    before = {team: counted(two_teams, team) for team in KEYS}
    document = {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}}
    for _ in range(3):
        r = send(two_teams, "a", [document, {"type": "text", "text": "Summarize."}])
        assert r.status_code == 200, r.text
    assert {team: counted(two_teams, team) for team in KEYS} == before
    for team in KEYS:
        r = send(two_teams, team, PROSE * 6)  # ~15k tokens: well within the window
        assert r.status_code == 200, r.text[:300]


def test_reports_out_of_reason_move_a_count_no_further_than_the_band(
    two_teams: RunningProxy,
) -> None:
    raw = raw_tokens()
    b_before = counted(two_teams, "b")
    for _ in range(4):  # under the cut for impossible counts, far over the text's
        assert send(two_teams, "a", PROSE, **{"x-fake-input-tokens": "99000000"}).status_code == 200
    high = counted(two_teams, "a")
    assert raw * 1.25 < high <= raw * 1.25 * BAND[1] * 1.01 + 50
    assert counted(two_teams, "b") == b_before  # another upstream: another calibration
    for _ in range(80):  # then an upstream reporting a token per request: the count comes
        send(two_teams, "a", PROSE, **{"x-fake-input-tokens": "1"})  # down, to the band's floor
    low = counted(two_teams, "a")
    assert raw * 1.25 * BAND[0] <= low < high
    assert counted(two_teams, "b") == b_before


def test_count_tokens_is_metered_and_charged_nothing(two_teams: RunningProxy) -> None:
    tokens = counted(two_teams, "a")
    rows = usage_rows(two_teams, at_least=1)
    row = rows[-1]
    assert (row["api"], row["team"], row["status"]) == ("count_tokens", "a", 200)
    assert row["tokens_before"] == row["tokens_after"] == tokens
    assert row["total_tokens"] == 0 and not row["cost_usd"]
