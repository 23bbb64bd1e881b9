"""A message of lines counted from its lines' own counts (ChatTokenizer.count_lines_message)
is counted exactly as the whole message: cl100k's and o200k's pre-tokenizers always end a
piece at a line break followed by a letter, whatever comes before it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.policy.model import Policy
from proxy.tokens.chat import ChatTokenizer
from proxy.tokens.counter import TokenCounter

COUNTER = TokenCounter()
TOKENIZERS = {
    "o200k_base": COUNTER.for_model("gpt-4o", Policy()),
    "cl100k_base": COUNTER.for_model("gpt-4", Policy()),
}
# What ends a line and starts the next matters: punctuation, spaces, digits, line breaks,
# apostrophes (the contractions' pieces), letters of other scripts, marks.
pieces = st.sampled_from(
    ["a", "Z", "word", " ", "  ", "\n", "\r\n", "\t", ".", "!?", "'s", "'", "12", "345", "/",
     "é", "É", "中文", "\u0301", "> ", ":", "-", "_", "😀", "<|endoftext|>", "\u00a0"]
)  # fmt: skip
text = st.lists(pieces, max_size=12).map("".join)
line = st.tuples(st.sampled_from(["User", "Assistant", "x", "Q"]), text).map("".join)


def test_both_encodings_are_the_ones_named() -> None:
    assert {t.name for t in TOKENIZERS.values()} == set(TOKENIZERS)
    assert all(isinstance(t, ChatTokenizer) for t in TOKENIZERS.values())


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(TOKENIZERS)), text, st.lists(line, min_size=0, max_size=6))
def test_a_message_of_lines_counts_as_the_whole(name: str, first: str, rest: list[str]) -> None:
    tokenizer = TOKENIZERS[name]
    assert isinstance(tokenizer, ChatTokenizer)
    lines = [first, *rest]
    message, count = tokenizer.count_lines_message("user", lines)
    assert message == {"role": "user", "content": "\n".join(lines)}
    whole = TokenCounter().for_model("gpt-4o" if name == "o200k_base" else "gpt-4", Policy())
    assert count == whole.count_message(message)  # a fresh counter: nothing remembered
    assert tokenizer.count_message(message) == count  # remembered under the message


def test_lines_that_do_not_start_with_a_letter_are_counted_whole() -> None:
    tokenizer = TOKENIZERS["o200k_base"]
    assert isinstance(tokenizer, ChatTokenizer)
    lines = ["head.", " leading space", "\nbreak", "1 digit"]
    message, count = tokenizer.count_lines_message("user", lines)
    whole = TokenCounter().for_model("gpt-4o", Policy())
    assert count == whole.count_message(message)
