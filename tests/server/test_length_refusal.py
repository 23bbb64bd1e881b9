"""An upstream's length refusal read from its words (length_step.length_refusal): OpenAI's,
vLLM's (OpenAI's words without the code), the Responses API's (no counts), Anthropic's
two; every other error, and numbers past belief, not taken for one."""

from __future__ import annotations

import orjson
import pytest

from proxy.server.pipeline.length_step import LengthRefusal, length_refusal


def openai_error(message: str, code: str | int | None = "context_length_exceeded") -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": "messages",
             "code": code}  # fmt: skip
    return orjson.dumps({"error": error})


def anthropic_error(message: str) -> bytes:
    return orjson.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )


@pytest.mark.parametrize(
    ("body", "read"),
    [
        (openai_error("This model's maximum context length is 128000 tokens. However, your "
                      "messages resulted in 130512 tokens. Please reduce the length of the "
                      "messages."), LengthRefusal(130512, 128000)),
        (openai_error("This model's maximum context length is 8192 tokens. However, you "
                      "requested 9000 tokens (8000 in the messages, 1000 in the completion). "
                      "Please reduce the length of the messages or completion."),
         LengthRefusal(8000, 8192)),
        (openai_error("This model's maximum context length is 8192 tokens. However, your "
                      "messages resulted in 9100 tokens (8000 in the messages, 1100 in the "
                      "functions)."), LengthRefusal(9100, 8192)),
        (openai_error("This model's maximum context length is 4096 tokens. However, you "
                      "requested 5000 tokens (4000 in the messages, 1000 in the completion).",
                      code=None), LengthRefusal(4000, 4096)),  # vLLM: no code, the words
        # vLLM's later words, with its code a number: the prompt's count said as input tokens
        (openai_error("This model's maximum context length is 32768 tokens. However, your "
                      "request has 40354 input tokens. Please reduce the length of the input "
                      "messages.", code=None), LengthRefusal(40354, 32768)),
        (openai_error("This model's maximum context length is 32768 tokens. However, you "
                      "requested 512 output tokens and your prompt contains at least 32769 "
                      "input tokens, for a total of at least 33281 tokens. Please reduce the "
                      "length of the input prompt or the number of requested output tokens.",
                      code=None), LengthRefusal(32769, 32768)),
        (openai_error("This model's maximum context length is 32768 tokens. However, you "
                      "requested 512 output tokens and your prompt contains 200000 characters "
                      "(more than 131072 characters, which is the upper bound for 32768 input "
                      "tokens).", code=None), LengthRefusal(None, 32768)),  # not a token count
        (openai_error("'max_tokens' or 'max_completion_tokens' is too large: 3000. This "
                      "model's maximum context length is 4096 tokens and your request has 2778 "
                      "input tokens (3000 > 4096 - 2778).", code=None),
         LengthRefusal(2778, 4096)),
        (openai_error("This endpoint's maximum context length is 8192 tokens. However, you "
                      "requested about 12000 tokens (10000 of text input, 2000 in the output). "
                      "Please reduce the length of either one.", code=None),
         LengthRefusal(10000, 8192)),  # OpenRouter's
        (openai_error("Your input exceeds the context window of this model. Please adjust "
                      "your input and try again."), LengthRefusal(None, None)),
        (anthropic_error("prompt is too long: 208000 tokens > 200000 maximum"),
         LengthRefusal(208000, 200000)),
        (anthropic_error("input length and `max_tokens` exceed context limit: 188240 + 21333 "
                         "> 200000, decrease input length or `max_tokens` and try again"),
         LengthRefusal(188240, 200000)),
    ],
)  # fmt: skip
def test_each_providers_refusal_is_read_with_its_counts(body: bytes, read: LengthRefusal) -> None:
    assert length_refusal(400, body) == read


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, openai_error("Invalid value for 'temperature'.", code="invalid_value")),
        (400, anthropic_error("messages: roles must alternate")),
        (429, openai_error("This model's maximum context length is 10 tokens.")),
        (400, b"<html>bad request</html>"),
        (400, b"[1, 2]"),
        (400, orjson.dumps({"error": "prompt is too long: 5 tokens > 4 maximum"})),
        (400, b"{" + b" " * 70_000 + b"}"),
        # an upstream's other error quoting what the client sent: not a refusal for length
        (
            400,
            anthropic_error(
                "messages.0.content: 'prompt is too long: 9 tokens > 8 maximum' is not valid"
            ),
        ),
        (
            400,
            openai_error(
                "Invalid 'name': This model's maximum context length is 10 tokens.",
                code="invalid_value",
            ),
        ),
        (
            400,
            openai_error(
                "max_tokens is too large: 1000000. This model supports at most "
                "16384 completion tokens, whereas you provided 1000000.",
                code=None,
            ),
        ),
        (
            400,
            openai_error(
                "Invalid 'name': 'max_tokens' is too large: 9. This model's maximum "
                "context length is 10 tokens.",
                code=None,
            ),
        ),
    ],
)
def test_other_errors_are_not_length_refusals(status: int, body: bytes) -> None:
    assert length_refusal(status, body) is None


def test_counts_past_belief_are_not_taken() -> None:
    """A count no request could reach is not read (the retry would plan to nothing)."""
    huge = anthropic_error("prompt is too long: 999999999999 tokens > 0 maximum")
    assert length_refusal(400, huge) == LengthRefusal(None, None)
