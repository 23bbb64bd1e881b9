"""`context-proxy plan` explains a Responses API body the way the server plans it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from proxy.cli.main import main
from tests.server.test_responses_e2e import SMALL_WINDOW, TOOLS, agent_loop


def write(tmp_path: Path, body: dict[str, object]) -> tuple[str, str]:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "default.yaml").write_text(SMALL_WINDOW)
    request = tmp_path / "request.json"
    request.write_bytes(orjson.dumps(body))
    return str(request), str(policies)


def test_plan_json_gives_a_responses_body(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    body = {"model": "gpt-4o", "instructions": "Be brief.", "input": agent_loop(40), "tools": TOOLS}
    request, policies = write(tmp_path, body)
    assert main(["plan", request, "--policies", policies, "--json"]) == 0
    answer = orjson.loads(capsysbinary.readouterr().out)
    sent = answer["request"]
    assert "messages" not in sent and sent["tools"] == TOOLS
    assert sent["input"][0] == body["input"][0]  # type: ignore[index]
    calls = {i["call_id"] for i in sent["input"] if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in sent["input"] if i.get("type") == "function_call_output"}
    assert calls == outputs and len(calls) > 0
    report = answer["report"]
    assert report["tokens_after"] <= report["budget"] < report["tokens_before"]


def test_plan_text_names_the_api_and_previous_response(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {"model": "gpt-4o", "previous_response_id": "resp_1", "input": "And then?"}
    request, policies = write(tmp_path, body)
    assert main(["plan", request, "--policies", policies]) == 0
    out = capsys.readouterr().out
    assert "Responses API body" in out
    assert "note: previous_response_id" in out
