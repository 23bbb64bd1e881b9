"""The newest answers stay, tagged or not: what a model reads last is what it can follow.

The newest `history.keep_recent` turns keep their replies' text while they fit in half of
the room the required parts leave (the oldest of them cut, head and end, when it must be);
only past that may a reply become a placeholder. Tags set a part's section and priority,
never the turn it belongs to; a client's summary stands in for the turns it covers once
they are left out. A text agent's steps (a command and what it printed) go together.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

from proxy.planner.request import plan_request
from proxy.policy.model import CachePolicy, ModelPolicy, Policy
from proxy.tokens import TokenCounter
from tests.coherence import GONE, WHOLE, coherence, forms
from tests.planner.test_planning import assistant, body_of, user, words
from tests.planner.test_planning import sys as system
from tests.planner_fakes import WordTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from techqa import conversation

WORDS = WordTokenizer()
OFF = Policy(cache=CachePolicy(enabled=False))
PLACEHOLDER = "[context-proxy: reply of"


def _setup(messages: list[dict[str, Any]]) -> int:
    return next(i for i, m in enumerate(messages) if m["role"] == "assistant")


def test_a_technical_chat_keeps_its_newest_answers_when_the_question_looks_back() -> None:
    # 12 turns of ~340-token answers, a 5,120-token window: the three newest turns take
    # about a third of the budget. Asked about the first answer, the proxy used to keep
    # the old answers whole and mask the newest ones.
    policy = Policy(models={"gpt-4o-mini": ModelPolicy(context_window=5120)})
    tokenizer = TokenCounter().for_model("gpt-4o-mini", policy)
    messages, answered = conversation(random.Random(1), 12)
    first = answered[0]
    asked = f"Going back to your answer about {first.topic}: what value did you suggest?"
    messages = [*messages, user(asked)]
    out = plan_request(body_of(messages, model="gpt-4o-mini"), policy, tokenizer, 5120)
    assert out.trimmed and out.tokens_after <= out.budget  # type: ignore[operator]
    sent = out.body["messages"]
    found = forms(messages, sent)
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    assert all(found[i] == WHOLE for i in replies[-3:]), [found[i] for i in replies]
    seen = coherence(messages, sent, _setup(messages), out.budget, tokenizer.count_message)  # type: ignore[arg-type]
    assert seen.split == 0 and seen.previous and not seen.newest_omitted


def test_the_newest_turns_fill_half_the_room_and_the_boundary_reply_keeps_head_and_end() -> None:
    msgs = [system(), assistant("Hello!")]
    for t in range(8):
        msgs += [
            user(f"question{t} " + words(10, f"q{t}_")),
            assistant(f"answer{t} " + words(120, f"a{t}_") + f" end{t}"),
        ]
    msgs.append(user("now"))
    out = plan_request(body_of(msgs), OFF, WORDS, 900)
    sent = out.body["messages"]
    texts = [str(m.get("content")) for m in sent]
    # The room the required parts leave is about 700 tokens: the two newest turns whole
    # (about 270 tokens), the third cut to the half's end with its head and its end.
    assert msgs[-2] in sent and msgs[-3] in sent and msgs[-4] in sent and msgs[-5] in sent
    cut = next(t for t in texts if t.startswith("answer5 "))
    assert "tokens of this reply cut, recall m" in cut and cut.endswith("end5")
    # Only older turns may have their replies as placeholders.
    assert not any(t.startswith(PLACEHOLDER) for t in texts[texts.index(cut) :])
    seen = coherence(msgs, sent, 1, out.budget, WORDS.count_message)  # type: ignore[arg-type]
    assert seen.split == 0 and seen.previous


def test_the_previous_reply_is_cut_never_masked_when_it_alone_is_over_half_the_room() -> None:
    msgs = [
        system(),
        assistant("Hi"),
        user("summarize the report"),
        assistant("report " + words(900) + " done"),
    ]
    msgs.append(user("thanks, and the totals?"))
    out = plan_request(body_of(msgs), OFF, WORDS, 600)
    sent = out.body["messages"]
    reply = next(str(m["content"]) for m in sent if str(m.get("content")).startswith("report "))
    assert "tokens of this reply cut, recall m" in reply and reply.endswith("done")
    assert not any(str(m.get("content")).startswith(PLACEHOLDER) for m in sent)


def test_a_tag_never_dissolves_a_turn() -> None:
    # Every user line carries a tag that names only an id: its turns stay turns (before,
    # every assistant line became one reply of the opening, masked as one placeholder).
    msgs = [system(), assistant("Hello!")]
    for t in range(30):
        msgs.append(user(f"line{t} " + words(20, f"u{t}_"), x_context={"id": f"u{t}"}))
        msgs.append(assistant(f"reply{t} " + words(20, f"r{t}_")))
    msgs.append(user("what did I say in line3? " + words(3, "u3_")))
    out = plan_request(body_of(msgs), OFF, WORDS, 700)
    sent = out.body["messages"]
    assert out.trimmed
    plain = [{k: v for k, v in m.items() if k != "x_context"} for m in msgs]
    seen = coherence(plain, sent, 1, out.budget, WORDS.count_message)  # type: ignore[arg-type]
    assert seen.split == 0 and seen.previous and not seen.newest_omitted
    replies = [
        m for m in sent if m["role"] == "assistant" and str(m["content"]).startswith("reply")
    ]
    assert len(replies) >= 3
    assert not any(str(m.get("content")).startswith(PLACEHOLDER) for m in sent[-4:])


def test_a_user_message_tagged_as_retrieved_context_keeps_its_reply() -> None:
    msgs = [system(), assistant("Hello!")]
    for t in range(10):
        tag = {"section": "retrieved_context"} if t == 2 else {}
        msgs.append(user(f"doc{t} " + words(40, f"d{t}_"), **({"x_context": tag} if tag else {})))
        msgs.append(assistant(f"noted{t} " + words(40, f"n{t}_")))
    msgs.append(user("go on"))
    for window in (300, 500, 700, 900):
        out = plan_request(body_of(msgs), OFF, WORDS, window)
        contents = [str(m.get("content")) for m in out.body["messages"]]
        asked = any(c.startswith("doc2 ") for c in contents)
        answered = any(c.startswith(("noted2 ", PLACEHOLDER)) for c in contents)
        assert asked == any(c.startswith("noted2 ") for c in contents) or (asked and answered)
        if not asked:
            assert not any(c.startswith("noted2 ") for c in contents), window


def _sessions(n: int, lines: int) -> list[dict[str, Any]]:
    msgs = [system(), assistant("Hello!")]
    for s in range(n):
        msgs.append(system(f"SUMMARY{s} of session {s}", x_context={"summary_of": f"s{s}"}))
        for t in range(lines):
            tag = {"cluster": f"s{s}"}
            msgs.append(user(f"s{s}u{t} " + words(15, f"s{s}u{t}_"), x_context=tag))
            msgs.append(assistant(f"s{s}a{t} " + words(15, f"s{s}a{t}_"), x_context=tag))
    return msgs


def test_summaries_stand_in_for_the_clustered_turns_left_out() -> None:
    msgs = [*_sessions(6, 6), user("and the last thing you said?")]
    out = plan_request(body_of(msgs), OFF, WORDS, 1200)
    sent = out.body["messages"]
    contents = [str(m.get("content")) for m in sent]
    summaries = [c for c in contents if c.startswith("SUMMARY")]
    assert summaries, "no summary stood in for the sessions left out"
    # A summary goes where the first of its dropped turns was, before later sessions'
    # lines, and never beside its whole session.
    for c in summaries:
        s = c.split(" ")[0].removeprefix("SUMMARY")
        lines = [x for x in contents if x.startswith(f"s{s}")]
        assert len(lines) < 12
    plain = [{k: v for k, v in m.items() if k != "x_context"} for m in msgs]
    seen = coherence(plain, sent, 1, out.budget, WORDS.count_message)  # type: ignore[arg-type]
    assert seen.split == 0 and seen.previous and not seen.newest_omitted
    assert all("x_context" not in m for m in sent)


def test_the_summary_of_a_session_kept_whole_is_dropped() -> None:
    msgs = [*_sessions(1, 3), user("now")]
    big = [system(), assistant("Hello!"), user("old " + words(300)), assistant("old " + words(300))]
    msgs = [*big, *msgs[2:]]
    out = plan_request(body_of(msgs), OFF, WORDS, 500)
    contents = [str(m.get("content")) for m in out.body["messages"]]
    assert all(any(c.startswith(f"s0{r}{t} ") for c in contents) for r in "ua" for t in range(3))
    assert not any(c.startswith("SUMMARY") for c in contents)


def _text_agent(steps: int) -> list[dict[str, Any]]:
    msgs = [system("Act with one shell command per reply."), user("Fix the parser. " + words(30))]
    for s in range(steps):
        msgs.append(assistant(f"THOUGHT: look at part {s}.\n\n```bash\ncat part{s}.py\n```"))
        msgs.append(user(f"<output>\n{words(150, f'p{s}_')}\n</output>"))
    return msgs


def test_a_text_agent_keeps_its_steps_whole_and_its_previous_step() -> None:
    msgs = _text_agent(14)
    out = plan_request(body_of(msgs), OFF, WORDS, 1500)
    sent = out.body["messages"]
    assert out.trimmed
    seen = coherence(msgs, sent, 2, out.budget, WORDS.count_message)  # type: ignore[arg-type]
    assert seen.split == 0 and seen.previous
    found = forms(msgs, sent)
    for command in range(2, len(msgs), 2):  # each step's command with its output
        assert (found[command] == GONE) == (found[command + 1] == GONE), command
