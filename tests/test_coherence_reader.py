"""The coherence reader (tests/coherence.py) that the benchmark and the end-to-end tests
judge trimmed requests by: a body written back as new objects (a Messages body read
again) whose history repeats a message word for word is paired by what its markers say."""

from __future__ import annotations

from typing import Any

from tests.coherence import GONE, WHOLE, coherence, forms, markers

Msg = dict[str, Any]
NAG = "Please always provide exactly one action."


def _history() -> list[Msg]:
    messages: list[Msg] = [{"role": "system", "content": "You run commands."}]
    messages.append({"role": "user", "content": "Fix the bug."})
    for n, said in enumerate(("first", "second", "third")):
        messages.append({"role": "assistant", "content": f"THOUGHT: {said} try, two actions"})
        messages.append({"role": "user", "content": NAG})
        messages.append({"role": "assistant", "content": f"THOUGHT: {said} answer {n}"})
    messages.append({"role": "user", "content": "Go on."})
    return messages


def _copy(m: Msg) -> Msg:
    return dict(m)  # a new object, as a body written back and read again is


def test_a_repeated_message_after_a_marker_is_the_one_past_the_turns_it_counts() -> None:
    messages = _history()  # 3, 6, 9: the nag; 4, 7, 10 their answers
    marker = "[context-proxy: 2 earlier turns omitted, recall t0a1b2c]"
    merged = {
        "role": "user",
        "content": [{"type": "text", "text": marker}, {"type": "text", "text": NAG}],
    }
    out = [*map(_copy, messages[:3]), merged, *map(_copy, messages[10:])]
    found = forms(messages, out)
    assert found[9] == WHOLE and found[3] == GONE and found[6] == GONE
    assert coherence(messages, out, 2, 10_000, lambda m: 10).split == 0


def test_without_a_marker_the_first_of_the_same_text_is_read() -> None:
    messages = _history()
    out = [*map(_copy, messages[:4]), *map(_copy, messages[10:])]
    found = forms(messages, out)
    assert found[3] == WHOLE and found[9] == GONE
    # Read so, the nag's answer is gone and the newest answer came without its question.
    assert coherence(messages, out, 2, 10_000, lambda m: 10).split == 2


def test_a_marker_message_of_its_own_counts_too() -> None:
    messages = _history()
    marker = {"role": "user", "content": "[context-proxy: 1 earlier turn omitted, recall t0a1b2c]"}
    out = [*map(_copy, messages[:3]), marker, *map(_copy, messages[6:])]
    found = forms(messages, out)
    assert found[6] == WHOLE and found[3] == GONE
    assert markers(out) == 1
