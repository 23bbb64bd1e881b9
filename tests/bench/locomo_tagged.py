"""LoCoMo tagged as a client with its own memory sends it (seed 004), for bench_quality.py.

Every line of session N carries `x_context: {cluster: "session_N"}`, and once session N
has ended the client sends LoCoMo's own `session_summary` of it as a system message just
before the session's first line: `{"role": "system", "content": summary, "x_context":
{"section": "conversation_summary", "summary_of": "session_N"}}` (where a client that writes
a summary when a session ends can put it without changing the prompt it sent before). The
requests and the evidence are quality_sets.locomo's: each user line replayed, and each
annotated question asked at the end of its conversation; the evidence is the annotated
lines, kept when forwarded as they came.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from quality_sets import _EVIDENCE, DATA, LOCOMO_SYSTEM, Evidence, Msg, Point, Stream

_SESSION = re.compile(r"session_(\d+)")


def _sessions(sample: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]], str]]:
    """Each session of a LoCoMo sample: its number, its lines and its summary."""
    c = sample["conversation"]
    summaries = sample.get("session_summary") or {}
    out = []
    for key, lines in c.items():
        m = _SESSION.fullmatch(key)
        if m is None or not isinstance(lines, list):
            continue
        summary = summaries.get(f"{key}_summary") or ""
        out.append((int(m.group(1)), lines, str(summary)))
    return sorted(out, key=lambda s: s[0])


def locomo_tagged(limit: int = 0) -> list[Stream]:
    data = orjson.loads((DATA / "locomo" / "locomo10.json").read_bytes())
    system = {"role": "system", "content": LOCOMO_SYSTEM}
    streams: list[Stream] = []
    questions: list[Point] = []
    for ci, sample in enumerate(data):
        c = sample["conversation"]
        role = {c["speaker_a"]: "user", c["speaker_b"]: "assistant"}
        lines: list[Msg] = []  # every line, tagged with its session
        notes: dict[int, tuple[int, Msg]] = {}  # first line -> (session's end, its summary)
        turn_of: dict[str, int] = {}
        for n, session, summary in _sessions(sample):
            cluster = f"session_{n}"
            start = len(lines)
            for turn in session:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                turn_of[turn["dia_id"]] = len(lines)
                message = {"role": role[turn["speaker"]], "content": text}
                lines.append({**message, "x_context": {"cluster": cluster}})
            if summary and len(lines) > start:
                tag = {"section": "conversation_summary", "summary_of": cluster}
                notes[start] = (
                    len(lines),
                    {"role": "system", "content": summary, "x_context": tag},
                )

        replay = [
            Point({"model": "gpt-4o", "messages": _sent(system, lines, notes, t + 1)})
            for t, m in enumerate(lines)
            if m["role"] == "user"
        ]
        streams.append(Stream(f"locomo-tagged/{ci}", replay))
        full = _sent(system, lines, notes, len(lines))
        index = {id(m): k for k, m in enumerate(full)}
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            ids = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(" ".join(qa["evidence"]))]
            found = sorted({turn_of[i] for i in ids if i in turn_of})
            if not found:
                continue
            question = {"role": "user", "content": str(qa["question"])}
            request = {"model": "gpt-4o", "messages": [*full, question]}
            ev = [Evidence(index[id(lines[i])], (lines[i]["content"],)) for i in found]
            questions.append(Point(request, ev, scored=True))
    streams.append(Stream("locomo-tagged/questions", questions[: limit or None], replay=False))
    return streams


def _sent(system: Msg, lines: list[Msg], notes: dict[int, tuple[int, Msg]], upto: int) -> list[Msg]:
    """The messages a client sends with lines[:upto]: the summaries of the ended sessions
    each before its session's first line."""
    out: list[Msg] = [system]
    for k in range(upto):
        note = notes.get(k)
        if note is not None and note[0] <= upto:
            out.append(note[1])
        out.append(lines[k])
    return out
