"""A real LiteLLM proxy (`litellm --config examples/litellm/config.yaml`, its own process)
with the hook, in front of the fake upstream, driven by the openai SDK over budget, plain
and streamed: what reaches the upstream fits and is, byte for byte, what the proxy's own
planner (`context-proxy plan`) makes of the same body under the same policy; a request
whose required parts cannot fit gets LiteLLM's 400 and never reaches the upstream."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.planner import plan_request
from proxy.policy import load_policy_dir
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream
from tests.litellm_proxy import ROOT, litellm_command

MASTER = "sk-litellm-master-0123456789abcdef0123"
POLICY = "budget: {reserve_output: false}\nmodels:\n  gpt-4o: {context_window: 2500}\n"


@pytest.fixture(scope="module")
def litellm_url(
    fake_upstream_server: tuple[FakeUpstream, str], tmp_path_factory: Any
) -> Iterator[str]:
    _, upstream = fake_upstream_server
    folder = tmp_path_factory.mktemp("litellm")
    for name in ("config.yaml", "context_proxy_hook.py"):
        shutil.copy(ROOT / "examples" / "litellm" / name, folder / name)
    (folder / "policies").mkdir()
    (folder / "policies" / "default.yaml").write_text(POLICY)
    port = free_port()
    environment = {**os.environ, "UPSTREAM_BASE_URL": upstream + "/v1", "OPENAI_API_KEY": "sk-up",
                   "LITELLM_MASTER_KEY": MASTER, "PYTHONPATH": str(ROOT),
                   "CONTEXT_PROXY_POLICIES": str(folder / "policies"),
                   "CONTEXT_PROXY_USAGE_LOG": str(folder / "usage.jsonl")}  # fmt: skip
    log = (folder / "litellm.log").open("w")
    process = subprocess.Popen(
        [str(litellm_command()), "--config", "config.yaml", "--port", str(port), "--host", "127.0.0.1"],
        cwd=folder, env=environment, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                if httpx.get(url + "/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    "the LiteLLM proxy did not start: "
                    + (folder / "litellm.log").read_text()[-3000:]
                )
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def long_chat() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You answer questions about the notes."}
    ]
    for k in range(30):
        messages.append(
            {"role": "user", "content": f"Note {k}: " + " ".join(f"fact{k}x{j}" for j in range(40))}
        )
        messages.append({"role": "assistant", "content": f"Noted {k}."})
    messages.append({"role": "user", "content": "What did note 3 say?"})
    return messages


@pytest.mark.parametrize("stream", [False, True])
def test_a_litellm_proxy_with_the_hook_forwards_the_proxys_plan(
    litellm_url: str, upstream: FakeUpstream, tmp_path_factory: Any, stream: bool
) -> None:
    client = openai.OpenAI(base_url=litellm_url + "/v1", api_key=MASTER, max_retries=0, timeout=60)
    messages = long_chat()
    if stream:
        chunks = list(
            client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
        )  # type: ignore[arg-type]
        assert chunks
    else:
        reply = client.chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
        assert reply.choices[0].message.content
    sent = upstream.chat_requests[-1].json()
    policies = load_policy_dir(_policies(tmp_path_factory))
    from proxy.tokens import ContextWindows, TokenCounter

    policy = policies.default
    body = {"model": "gpt-4o", "messages": messages}
    expected = plan_request(
        body,
        policy,
        TokenCounter().chat_tokenizer("gpt-4o", policy),
        ContextWindows().lookup("gpt-4o", policy),
    )
    assert expected.tokens_after <= 2000 < expected.tokens_before
    assert orjson.dumps(sent["messages"]) == orjson.dumps(expected.body["messages"])
    assert sent.get("stream", False) is stream
    log = _policies(tmp_path_factory).parent / "usage.jsonl"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # written once LiteLLM has logged the answer
        rows = [orjson.loads(x) for x in log.read_bytes().splitlines()] if log.exists() else []
        if any(r["stream"] is stream for r in rows):
            break
        time.sleep(0.2)
    row = next(r for r in rows if r["stream"] is stream)
    assert (row["tokens_before"], row["tokens_after"]) == (
        expected.tokens_before,
        expected.tokens_after,
    )
    assert row["status"] == 200 and row["model"].endswith("gpt-4o")


def test_a_request_that_cannot_fit_gets_litellms_400(
    litellm_url: str, upstream: FakeUpstream
) -> None:
    client = openai.OpenAI(base_url=litellm_url + "/v1", api_key=MASTER, max_retries=0, timeout=60)
    before = len(upstream.chat_requests)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "word " * 5000}]
        )
    assert "context" in str(refused.value).lower()
    assert len(upstream.chat_requests) == before


def _policies(factory: Any) -> Path:
    found = sorted(Path(factory.getbasetemp()).glob("litellm*/policies"))
    return found[-1]
