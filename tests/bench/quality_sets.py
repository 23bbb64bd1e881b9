"""The data sets of bench_quality.py, each as streams of requests with their evidence.

A stream is one conversation or run, replayed request by request (what a client resends
at each turn or step); a point is one request of it, with the messages whose content the
answer needs (its evidence) and how many leading messages are its setup. Data are read in
place from ../shared/data/ (each folder's README gives source and license).

- locomo: LoCoMo's ten conversations replayed turn by turn (cached share), and each
  annotated question (categories 1-4) asked at the end of its conversation (evidence:
  the annotated turns).
- locomo-tagged: the same, tagged as a client with its own memory sends it: each session
  a cluster, and its summary sent once it ended (locomo_tagged.py).
- realmem: RealMem's ten long assistant chats replayed user turn by user turn; a query
  turn's evidence is the turns behind the memory items its answer used.
- tau-airline: the tool-calling customer-service runs, at every assistant message; the
  evidence is the older tool results whose ids, flight numbers or amounts it repeats.
- agent-runs: the coding-agent runs at every tool call; the evidence is the results
  holding the paths, identifiers and lines of the call's command (bench_agents.py).
- text-agent: the same runs sent as text: the command in a fenced block in the assistant
  message, its output back as a user message (as text-only agents work).
- claude-code: real Claude Code sessions as Messages bodies, at each decision point
  (claude_code_set.py).
- swe-agent, swe-agent-text: the coding-agent runs rewritten in SWE-agent's shape (file
  windows with numbered lines from `open`/`goto`, edits that print the window:
  swe_agent_set.py), with tool calls and as text.
- techqa: generated technical Q&A (techqa.py): short questions, long answers, and
  questions about an early answer's setting.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / ".." / "shared" / "data"
Msg = dict[str, Any]


@dataclass
class Evidence:
    """A message the answer needs: its index in the request, and the strings that show it
    survived when it was cut (its whole content for a turn of a chat)."""

    index: int
    keys: tuple[str, ...]


@dataclass
class Point:
    body: dict[str, Any]
    evidence: list[Evidence] = field(default_factory=list)
    scored: bool = False  # whether its evidence counts (a question, a decision point)
    native: dict[str, Any] | None = None  # the Messages body the client sent, if it sent one
    # What a model that calls the proxy's recall tool asks it for (evidence reachable): an
    # agent's next action's target; None: the newest user message (a chat's question).
    query: str | None = None


@dataclass
class Stream:
    name: str
    points: list[Point]
    replay: bool = True  # consecutive points are one client's consecutive requests
    # How the evidence's strings are read in a message (claude_code_set: paths relative).
    normalize: Callable[[str], str] | None = None


def setup_length(messages: Sequence[Msg]) -> int:
    """Messages before the first assistant message (none without one, bar system ones)."""
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
    if first is None:
        return next((i for i, m in enumerate(messages) if m.get("role") != "system"), 0)
    return first


# ---- LoCoMo ----------------------------------------------------------------------------

LOCOMO_SYSTEM = "You are a helpful assistant with a long memory. Answer from the conversation."
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")


def locomo(limit: int = 0) -> list[Stream]:
    data = orjson.loads((DATA / "locomo" / "locomo10.json").read_bytes())
    system = {"role": "system", "content": LOCOMO_SYSTEM}
    streams: list[Stream] = []
    questions: list[Point] = []
    for ci, sample in enumerate(data):
        c = sample["conversation"]
        role = {c["speaker_a"]: "user", c["speaker_b"]: "assistant"}
        keys = [k for k, v in c.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)]
        messages: list[Msg] = []
        turn_of: dict[str, int] = {}
        for key in sorted(keys, key=lambda k: int(k.split("_")[1])):
            for turn in c[key]:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                turn_of[turn["dia_id"]] = len(messages)
                messages.append({"role": role[turn["speaker"]], "content": text})
        replay = [
            Point({"model": "gpt-4o", "messages": [system, *messages[: t + 1]]})
            for t, m in enumerate(messages)
            if m["role"] == "user"
        ]
        streams.append(Stream(f"locomo/{ci}", replay))
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            ids = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(" ".join(qa["evidence"]))]
            found = sorted({turn_of[i] for i in ids if i in turn_of})
            if not found:
                continue
            question = {"role": "user", "content": str(qa["question"])}
            body = {"model": "gpt-4o", "messages": [system, *messages, question]}
            ev = [Evidence(1 + i, (messages[i]["content"],)) for i in found]
            questions.append(Point(body, ev, scored=True))
    streams.append(Stream("locomo/questions", questions[: limit or None], replay=False))
    return streams


# ---- RealMem ---------------------------------------------------------------------------

REALMEM_SYSTEM = "You are a helpful personal assistant. You remember what the user told you."


def realmem(limit: int = 0) -> list[Stream]:
    streams: list[Stream] = []
    for path in sorted((DATA / "realmem").glob("*_dialogues_256k.json"))[: limit or None]:
        data = orjson.loads(path.read_bytes())
        messages: list[Msg] = [{"role": "system", "content": REALMEM_SYSTEM}]
        where: dict[tuple[str, int], int] = {}  # (session uuid, turn index) -> message
        snapshots: dict[str, list[tuple[str, int]]] = {}  # session -> (turn text, message)
        memory: dict[str, list[dict[str, Any]]] = {}  # session uuid -> its extracted items
        points: list[Point] = []
        for session in data["dialogues"]:
            uuid = session["session_uuid"]
            memory[uuid] = list(session.get("extracted_memory") or [])
            for t, turn in enumerate(session["dialogue_turns"]):
                role = "user" if turn["speaker"] == "User" else "assistant"
                where[(uuid, t)] = len(messages)
                snapshots.setdefault(uuid, []).append((turn["content"], len(messages)))
                messages.append({"role": role, "content": turn["content"]})
                if role != "user":
                    continue
                point = Point({"model": "gpt-4o", "messages": list(messages)})
                if turn.get("is_query") is True:
                    answer = _next_turn(session["dialogue_turns"], t)
                    found = _realmem_evidence(answer, memory, snapshots, len(messages) - 1)
                    point.evidence = [Evidence(i, (messages[i]["content"],)) for i in found]
                    point.scored = bool(found)
                points.append(point)
        streams.append(Stream("realmem/" + path.name.split("_dialogues")[0], points))
    return streams


def _next_turn(turns: Sequence[dict[str, Any]], t: int) -> dict[str, Any] | None:
    return turns[t + 1] if t + 1 < len(turns) else None


def _realmem_evidence(
    answer: dict[str, Any] | None,
    memory: dict[str, list[dict[str, Any]]],
    snapshots: dict[str, list[tuple[str, int]]],
    before: int,
) -> list[int]:
    """The messages behind the memory items the answer used (matched by the item's text,
    then its source turn's snapshot), earlier than the query itself."""
    if answer is None:
        return []
    raw = answer.get("memory_used")
    try:
        used = ast.literal_eval(raw) if isinstance(raw, str) else raw
    except (ValueError, SyntaxError):
        return []
    found: set[int] = set()
    for item in used or ():
        if not isinstance(item, dict):
            continue
        uuid, content = item.get("session_uuid"), str(item.get("content") or "")
        for entry in memory.get(uuid, ()):
            if content and (content in entry["content"] or entry["content"] in content):
                snap = str(entry.get("source_content_snapshot") or "")[:200]
                for text, i in snapshots.get(uuid, ()):
                    if snap and text.startswith(snap) and i < before:
                        found.add(i)
    return sorted(found)


# ---- tau-bench airline ----------------------------------------------------------------

_ID = re.compile(r"[A-Za-z0-9_]*\d[A-Za-z0-9_]*")


def tau_airline(limit: int = 0) -> list[Stream]:
    runs = orjson.loads((DATA / "tau-airline" / "gpt-4o-airline-tasks00-24.json").read_bytes())
    tools = _tau_tools(runs)
    streams: list[Stream] = []
    for r, run in enumerate(runs[: limit or None]):
        traj = run["traj"]
        points = []
        for k, m in enumerate(traj):
            if k < 2 or m.get("role") != "assistant":
                continue
            body = {"model": "gpt-4o", "messages": traj[:k], "tools": tools}
            action = _action_text(m)
            ev = _tau_evidence(traj[:k], action)
            points.append(Point(body, ev, scored=bool(ev), query=action))
        streams.append(Stream(f"tau/{r}", points))
    return streams


def _action_text(message: Msg) -> str:
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or ():
        parts.append(str(call.get("function", {}).get("arguments", "")))
    return "\n".join(parts)


def _tau_evidence(messages: Sequence[Msg], action: str) -> list[Evidence]:
    """Older tool results holding an id, flight number, date or amount the next action
    repeats (a string with a digit, 3 characters or more), bar those in the current user
    turn or in half the results or more (what every result holds)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
    said = str(messages[last_user].get("content") or "")
    keys = {k for k in _ID.findall(action) if len(k) >= 3 and k not in said}
    results = [
        (i, m["content"])
        for i, m in enumerate(messages)
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
    ]
    if len(results) >= 4:
        keys = {k for k in keys if 2 * sum(k in text for _, text in results) <= len(results)}
    out = []
    for i, text in results:
        hit = tuple(sorted(k for k in keys if k in text))
        if hit:
            out.append(Evidence(i, hit))
    return out


def _tau_tools(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools' schemas, rebuilt from the calls' names and arguments (not in the file)."""
    seen: dict[str, dict[str, str]] = {}
    for run in runs:
        for m in run["traj"]:
            for call in m.get("tool_calls") or ():
                f = call["function"]
                try:
                    args = orjson.loads(f["arguments"])
                except orjson.JSONDecodeError:
                    args = {}
                props = seen.setdefault(f["name"], {})
                for key, value in args.items() if isinstance(args, dict) else ():
                    props.setdefault(key, _json_type(value))
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"The airline's {name.replace('_', ' ')} operation.",
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": t} for k, t in sorted(props.items())},
                    "required": sorted(props),
                },
            },
        }
        for name, props in sorted(seen.items())
    ]


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


# ---- coding-agent runs, with tool calls and as text ------------------------------------


def agent_runs(limit: int = 0, text: bool = False) -> list[Stream]:
    from bench_agents import DEFAULT_PATH, command_of, evidence, load

    streams: list[Stream] = []
    for r, row in enumerate(load(DEFAULT_PATH.resolve())[: limit or None]):
        msgs = row["messages"]
        sent = as_text(msgs) if text else msgs
        points = []
        for k, m in enumerate(msgs):
            command = command_of(m)
            if command is None or k < 2:
                continue
            body: dict[str, Any] = {"model": "gpt-4o", "messages": sent[:k]}
            if not text:
                body["tools"] = row["tools"]
            found = evidence(msgs[:k], command, 8)
            index = {msg.get("tool_call_id"): i for i, msg in enumerate(msgs[:k])}
            ev = [Evidence(index[c], tuple(sorted(keys))) for c, keys in found.items()]
            points.append(Point(body, ev, scored=True, query=command))
        streams.append(Stream(("text-agent/" if text else "agents/") + str(r), points))
    return streams


def as_text(messages: Sequence[Msg]) -> list[Msg]:
    """A tool-calling run as a text agent sends it: each call a fenced command in the
    assistant's text, each result the next user message (one message for one)."""
    out: list[Msg] = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            commands = []
            for call in calls:
                try:
                    args = orjson.loads(call["function"]["arguments"])
                except (orjson.JSONDecodeError, KeyError):
                    args = {}
                commands.append(str(args.get("command", "")) if isinstance(args, dict) else "")
            blocks = "\n\n".join(f"```bash\n{c}\n```" for c in commands)
            thought = str(m.get("content") or "").strip()
            out.append({"role": "assistant", "content": f"{thought}\n\n{blocks}".strip()})
        elif m.get("role") == "tool":
            output = str(m.get("content") or "")
            out.append({"role": "user", "content": f"<output>\n{output}\n</output>"})
        else:
            out.append({k: v for k, v in m.items() if k in ("role", "content")})
    return out


def as_messages_body(body: dict[str, Any]) -> dict[str, Any]:
    """A chat body as Anthropic's Messages API takes it: system messages in `system`, each
    call a `tool_use` block, each run of tool results one user message of `tool_result`
    blocks, tools as `input_schema`."""
    system = "\n\n".join(
        str(m.get("content")) for m in body["messages"] if m.get("role") == "system"
    )
    messages: list[Msg] = []
    for m in body["messages"]:
        role = m.get("role")
        if role == "system":
            continue
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": m["content"],
            }
            if (
                messages
                and messages[-1]["role"] == "user"
                and isinstance(messages[-1]["content"], list)
            ):
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
            continue
        if role == "assistant" and m.get("tool_calls"):
            blocks: list[Msg] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            for call in m["tool_calls"]:
                try:
                    given = orjson.loads(call["function"]["arguments"])
                except orjson.JSONDecodeError:
                    given = {}
                blocks.append({"type": "tool_use", "id": call["id"],
                               "name": call["function"]["name"], "input": given})  # fmt: skip
            messages.append({"role": "assistant", "content": blocks})
            continue
        messages.append({"role": "assistant" if role == "assistant" else "user",
                         "content": str(m.get("content") or "")})  # fmt: skip
    out: dict[str, Any] = {"model": body["model"], "max_tokens": 1024, "messages": messages}
    if system:
        out["system"] = system
    tools = [t.get("function", t) for t in body.get("tools") or ()]
    if tools:
        out["tools"] = [{"name": t["name"], "description": t.get("description", ""),
                         "input_schema": t.get("parameters", {})} for t in tools]  # fmt: skip
    return out


SETS = {
    "locomo": locomo,
    "locomo-tagged": lambda limit=0: _locomo_tagged(limit),
    "realmem": realmem,
    "tau-airline": tau_airline,
    "agent-runs": agent_runs,
    "text-agent": lambda limit=0: agent_runs(limit, text=True),
    # The same runs sent as Messages bodies (bench_quality.py plans them through the
    # Messages API's read and write steps).
    "agent-runs-messages": agent_runs,
    "techqa": lambda limit=0: _techqa(limit),
    "claude-code": lambda limit=0: _claude_code(limit),
    "swe-agent": lambda limit=0: _swe_agent(limit),
    "swe-agent-text": lambda limit=0: _swe_agent(limit, text=True),
}


def _claude_code(limit: int) -> list[Stream]:
    from claude_code_set import claude_code  # it builds on this module's types

    return claude_code(limit)


def _swe_agent(limit: int, text: bool = False) -> list[Stream]:
    from swe_agent_set import swe_agent  # it builds on this module's types

    return swe_agent(limit, text)


def _locomo_tagged(limit: int) -> list[Stream]:
    from locomo_tagged import locomo_tagged  # it builds on this module's types

    return locomo_tagged(limit)


def _techqa(limit: int) -> list[Stream]:
    from techqa import techqa  # it builds on this module's types

    return techqa(limit)


def iter_points(streams: Sequence[Stream]) -> Iterator[tuple[Stream, Point]]:
    for stream in streams:
        for point in stream.points:
            yield stream, point
