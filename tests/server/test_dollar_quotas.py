"""Quotas in dollars (`quotas: {daily_usd, monthly_usd}`): the answered requests' cost at
the bundled prices is charged to the team; a hard one answers 429 with `Retry-After` once
spent, a soft one crosses its thresholds (logged and counted, source "spend"), and a
restart reads today's spend back from the usage log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.policy import load_policy_dir
from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}


def send(url: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=BODY, timeout=20)


def test_the_policy_reads_dollar_quotas(policies_dir: Path) -> None:
    (policies_dir / "default.yaml").write_text("quotas: {daily_usd: 2.5, monthly_usd: 40}\n")
    quotas = load_policy_dir(policies_dir).default.quotas
    assert (quotas.daily_usd, quotas.monthly_usd) == (2.5, 40)
    assert quotas.in_micro_usd().daily_tokens == 2_500_000
    (policies_dir / "default.yaml").write_text("quotas: {daily_usd: -1}\n")
    with pytest.raises(Exception, match="daily_usd"):
        load_policy_dir(policies_dir)


def test_a_hard_dollar_quota_refuses_once_spent(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text("quotas: {daily_usd: 0.0003, hard_limit: true}\n")
    proxy = start_proxy()
    answers = [send(proxy.url) for _ in range(6)]
    served = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert served and refused and len(served) + len(refused) == 6
    assert answers.index(refused[0]) == len(served)  # once spent, every later one refused
    assert refused[0].json()["error"]["code"] == "quota_exceeded"
    assert "budget" in refused[0].json()["error"]["message"]
    assert (
        int(refused[0].headers["retry-after"]) > 0
        and refused[0].headers["x-should-retry"] == "false"
    )
    assert len(upstream.chat_requests) == len(served)
    spent = sum(r["cost_usd"] or 0 for r in usage_rows(proxy, at_least=6) if r["status"] == 200)
    assert spent >= 0.0003 > spent - max(r["cost_usd"] or 0 for r in usage_rows(proxy))


def test_a_soft_dollar_quota_crosses_its_thresholds(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path
) -> None:
    (policies_dir / "default.yaml").write_text("quotas: {daily_usd: 0.0003}\n")
    proxy = start_proxy()
    assert all(send(proxy.url).status_code == 200 for _ in range(4))
    metrics = httpx.get(proxy.url + "/metrics").text
    crossed = [line for line in metrics.splitlines()
               if line.startswith("context_proxy_threshold_events_total") and 'source="spend"' in line]  # fmt: skip
    assert crossed and sum(float(line.split()[-1]) for line in crossed) >= 1


def test_a_restart_reads_todays_spend_from_the_log(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, tmp_path: Path
) -> None:
    from proxy.usage import UsageRecord

    (policies_dir / "default.yaml").write_text("quotas: {daily_usd: 1.0, hard_limit: true}\n")
    log = tmp_path / "usage.jsonl"
    row = UsageRecord(team="default", model="gpt-4o", status=200, cost_usd=0.6)
    log.write_bytes(row.to_json_line() * 2)  # $1.20 spent today, before the restart
    proxy = start_proxy(usage_log=str(log))
    refused = send(proxy.url)
    assert refused.status_code == 429 and not upstream.chat_requests
    assert orjson.loads(refused.content)["error"]["code"] == "quota_exceeded"
