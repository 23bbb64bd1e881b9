"""A length refusal the proxy caused never reaches the client: an upstream that counts more
than the proxy does (tests/fake_window.py), or whose window is smaller than the policy's,
refuses a forwarded request as too long; the proxy plans it again to the upstream's own
count and sends it once more, and learns, so that the next request goes through the first
time. Chat completions, the Responses API and Messages, plain and streamed, through the
official SDKs; the client gets a length error only when the required parts alone do not
fit, or when the upstream refuses the retry too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from tests.fake_upstream import FakeUpstream
from tests.server.test_proxy_e2e import usage_rows

CLAUDE, GPT = "claude-sonnet-4-6", "gpt-4o-mini"
SAID = 120  # turns of the conversation: about 24k tokens, over every window here


def history(turns: int = SAID) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for n in range(turns):
        out.append(
            {"role": "user", "content": f"Note {n}: " + "the tide was low and the pier wet. " * 12}
        )
        out.append({"role": "assistant", "content": f"Noted {n}: " + "a calm, grey morning. " * 10})
    out.append({"role": "user", "content": "What did the first note say about the pier?"})
    return out


def setup(
    policies_dir: Path, upstream: FakeUpstream, base: str, policy_window: int, window: int
) -> None:
    """The policy says `policy_window`; the upstream takes `window`, counted its own way."""
    (policies_dir / "default.yaml").write_text(
        f"upstream: {{anthropic: {{base_url: '{base}'}}}}\nrecall: {{tool: off}}\n"
        f"models:\n  {GPT}: {{context_window: {policy_window}}}\n"
        f"  {CLAUDE}: {{context_window: {policy_window}}}\n"
    )
    upstream.window = window


def ask(proxy: Any, api: str, stream: bool, turns: int = SAID) -> str:
    """One question through the API's SDK: the answer's text."""
    said = history(turns)
    if api == "messages":
        claude = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
        kwargs: dict[str, Any] = {"model": CLAUDE, "max_tokens": 8192, "messages": said}
        if stream:
            with claude.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = claude.messages.create(**kwargs)
        return "".join(b.text for b in message.content if b.type == "text")
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    if api == "responses":
        if stream:
            with sdk.responses.stream(model=GPT, input=said) as events:  # type: ignore[arg-type]
                return events.get_final_response().output_text
        return sdk.responses.create(model=GPT, input=said).output_text  # type: ignore[arg-type]
    if stream:
        chunks = sdk.chat.completions.create(model=GPT, messages=said, stream=True)  # type: ignore[arg-type]
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    answer = sdk.chat.completions.create(model=GPT, messages=said)  # type: ignore[arg-type]
    return answer.choices[0].message.content or ""


# The policy's window and the upstream's: Claude's count is an estimate, which the upstream
# outcounts (its window as the policy says); GPT's is exact, and its upstream's window is
# smaller than the policy says (chat says how much; the Responses API says nothing).
CASES = {"chat": (16_000, 12_000), "responses": (16_000, 13_000), "messages": (40_000, 40_000)}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_length_refusal_the_proxy_caused_is_planned_again_and_learned(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any,
    api: str, stream: bool,
) -> None:  # fmt: skip
    setup(policies_dir, upstream, fake_upstream_server[1], *CASES[api])
    proxy = start_proxy()
    assert ask(proxy, api, stream)  # the client had its answer, never the refusal
    assert upstream.refused == 1 and len(upstream.requests) == 2  # refused once, then sent
    row = usage_rows(proxy)[-1]
    assert row["status"] == 200 and row["tokens_after"] < row["tokens_before"]
    assert ask(proxy, api, stream)  # learned: the next request is planned right at once
    assert upstream.refused == 1 and len(upstream.requests) == 3


def test_the_sum_wording_of_a_messages_refusal_is_read_too(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any
) -> None:
    """Anthropic refuses a prompt that fits but leaves no room for `max_tokens` in words
    of its own ("input length and `max_tokens` exceed context limit: N + K > W")."""
    setup(policies_dir, upstream, fake_upstream_server[1], 40_000, 40_000)
    upstream.window_wording = "sum"
    proxy = start_proxy()
    assert ask(proxy, "messages", False)
    assert upstream.refused == 1 and len(upstream.requests) == 2


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_required_parts_over_the_upstreams_window_get_the_length_error(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any,
    api: str,
) -> None:  # fmt: skip
    """The current turn alone is over the window the upstream takes (not over the
    policy's): planned again to that window, the required parts do not fit, and the
    client gets the proxy's own length error in its API's shape; nothing is sent again."""
    policy_window, window = CASES[api]
    setup(policies_dir, upstream, fake_upstream_server[1], policy_window, window // 2)
    proxy = start_proxy()
    # Over the upstream's window, within the policy's budget.
    question = [{"role": "user", "content": "the pier " * {"chat": 4000, "messages": 10000}[api]}]
    if api == "messages":
        claude = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-client", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.create(model=CLAUDE, max_tokens=4096, messages=question)  # type: ignore[arg-type]
        assert "prompt is too long" in str(refused.value)
    else:
        sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.chat.completions.create(model=GPT, messages=question)  # type: ignore[arg-type]
        assert refused.value.code == "context_length_exceeded"
    assert upstream.refused == 1 and len(upstream.requests) == 1
    row = usage_rows(proxy)[-1]
    assert row["status"] == 400 and row["error"] == "context_length_exceeded"
    assert row["total_tokens"] == 0  # never served: nothing charged


def test_an_upstream_that_refuses_the_retry_too_is_answered_with_its_own_refusal(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any
) -> None:
    """Retried once, never more: an upstream whose window no plan can meet (it says 100
    tokens) refuses the retry as well, and the client gets that refusal as it came."""
    setup(policies_dir, upstream, fake_upstream_server[1], 16_000, 100)
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=GPT, messages=history(40))  # type: ignore[arg-type]
    assert "maximum context length is 100 tokens" in str(refused.value)
    assert upstream.refused == 2 and len(upstream.requests) == 2
    assert usage_rows(proxy)[-1]["status"] == 400


LOCAL = "local-qwen-7b-instruct"  # a name no map knows, and the policy gives no window


@pytest.mark.parametrize(
    ("wording", "stream"), [("prompt", False), ("vllm", True), ("vllm", False)]
)
def test_a_model_known_nowhere_takes_the_window_its_upstream_says(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any,
    wording: str, stream: bool, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A model with no window in the policy or the bundled map goes untrimmed, so a
    self-hosted model's window (vLLM's `max_model_len`) is first heard of in its refusal:
    the proxy takes that window for the model at that upstream, plans the request to it and
    sends it once more; the next request is planned to it at once."""
    (policies_dir / "default.yaml").write_text("recall: {tool: off}\n")
    upstream.window, upstream.window_wording = 12_000, wording
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)

    def ask_local() -> str:
        said: Any = history()
        if stream:
            chunks = sdk.chat.completions.create(model=LOCAL, messages=said, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        answer = sdk.chat.completions.create(model=LOCAL, messages=said, max_tokens=1000)
        return answer.choices[0].message.content or ""

    assert ask_local()
    assert upstream.refused == 1 and len(upstream.requests) == 2
    row = usage_rows(proxy)[-1]
    assert row["status"] == 200 and row["tokens_after"] < 12_000 < row["tokens_before"]
    assert ask_local()  # planned to the window the upstream said, the first time
    assert upstream.refused == 1 and len(upstream.requests) == 3
    said = [r.getMessage() for r in caplog.records if r.name == "context_proxy.plan"]
    assert sum("no context window is known for it" in m for m in said) == 1


def test_vllms_words_for_an_answer_limit_that_leaves_the_prompt_no_room(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any
) -> None:
    """vLLM refuses a prompt that fits its window but not with the answer's limit in its own
    words ("'max_tokens' or 'max_completion_tokens' is too large: K. ... your request has N
    input tokens"): read as a length refusal, the prompt is planned to leave the answer room."""
    (policies_dir / "default.yaml").write_text(
        f"recall: {{tool: off}}\nbudget: {{ratio: 0.6}}\n"
        f"models:\n  {LOCAL}: {{context_window: 16000}}\n"
    )  # planned to 9,600 tokens: within the upstream's 12,000, not with 4,000 more
    upstream.window, upstream.window_wording = 12_000, "vllm"
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    said: Any = history()
    answer = sdk.chat.completions.create(model=LOCAL, messages=said, max_tokens=4000)
    assert answer.choices[0].message.content
    assert upstream.refused == 1 and len(upstream.requests) == 2
    assert b"is too large" in upstream.refusals[0]


def test_a_window_said_for_a_model_known_nowhere_is_never_taken_below_a_floor(
    start_proxy: Any, upstream: FakeUpstream, policies_dir: Path, fake_upstream_server: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """An upstream that says a model takes 100 tokens: the proxy plans to 512 at the
    least (what one upstream says serves every team on it), sends once more, and passes the
    upstream's second refusal on as it came; never a third try."""
    (policies_dir / "default.yaml").write_text("recall: {tool: off}\n")
    upstream.window = 100
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-client", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(model=LOCAL, messages=history(40))  # type: ignore[arg-type]
    assert "maximum context length is 100 tokens" in str(refused.value)
    assert upstream.refused == 2 and len(upstream.requests) == 2
    said = [r.getMessage() for r in caplog.records if r.name == "context_proxy.plan"]
    assert any("it takes about 512 tokens" in m for m in said)
    retried = orjson.loads(upstream.requests[1].body)
    assert len(retried["messages"]) < len(history(40))  # planned to the floor, not to 100
