"""Time to first token of a stream whose model calls the proxy's recall tool, against the
same stream with the tool off, in one run.

Usage: python tests/bench/bench_recall_stream.py [--streams N] [--no-write]

A fake model (tests/fake_recall.py) streams a few words after FIRST_TOKEN_DELAY_S, then a
call of `context_recall` whose arguments take 0.2 s more, and, given the tool's answer,
its final words. Through the proxy (one worker, loopback), N trimmed chat requests are
streamed with `recall: {tool: on}` and N with `recall: {tool: off}` (then the model says its
words and stops), in alternating pairs; each stream's time to its first content token, to
its end, and the number of upstream rounds are taken. The recall stream's first token must
not wait for the call or the continuation: it comes at the upstream's first token plus the
proxy's usual overhead, like the stream without the tool. Results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from procs import write_doc_section  # noqa: E402

from proxy.server.app.app import create_app  # noqa: E402
from proxy.server.core.settings import Settings  # noqa: E402
from tests.conftest import serve  # noqa: E402
from tests.fake_recall import FIRST_TOKEN_DELAY_S  # noqa: E402
from tests.fake_upstream import FakeUpstream  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench_recall_stream: begin -->", "<!-- bench_recall_stream: end -->"
WINDOW = 2048


def history() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for n in range(24):
        messages.append({"role": "user", "content": f"Note {n}: " + "mild grey weather. " * 12})
        messages.append({"role": "assistant", "content": f"Noted {n}. " + "fine " * 40})
    messages.append({"role": "user", "content": "What was the first note about?"})
    return messages


def one_stream(client: httpx.Client, url: str, team_key: str) -> tuple[float, float]:
    """Seconds to the first content token and to the end of one streamed request."""
    body = {"model": "gpt-4o-mini", "messages": history(), "stream": True}
    started = time.perf_counter()
    first = None
    with client.stream(
        "POST", url + "/v1/chat/completions", json=body,
        headers={"authorization": f"Bearer {team_key}"},
    ) as response:  # fmt: skip
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = orjson.loads(line[6:])
            for choice in chunk.get("choices") or ():
                if first is None and (choice.get("delta") or {}).get("content"):
                    first = time.perf_counter() - started
    end = time.perf_counter() - started
    return (first if first is not None else end), end


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--streams", type=int, default=30)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    upstream = FakeUpstream(mode="recall_or_text")
    with tempfile.TemporaryDirectory() as tmp, serve(upstream.app()) as base:
        policies = Path(tmp) / "policies"
        policies.mkdir()
        models = (
            f"models:\n  gpt-4o-mini: {{context_window: {WINDOW}}}\nhistory: {{relevance: off}}\n"
        )
        from proxy.policy.model import hash_key

        for team, mode in (("on", "on"), ("off", "off")):
            (policies / f"{team}.yaml").write_text(
                f'keys: ["{hash_key("k-" + team)}"]\nupstream: {{api_key_env: NONE}}\n'
                f"recall: {{tool: {mode}}}\n{models}"
            )
        settings = Settings(
            policies=str(policies), upstream=base + "/v1", usage_log=str(Path(tmp) / "u.jsonl"),
            watch_policies=False,
        )  # fmt: skip
        with serve(create_app(settings)) as url, httpx.Client(timeout=30) as client:
            one_stream(client, url, "k-on")  # warm: encodings, connections
            one_stream(client, url, "k-off")
            seen: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
            for _ in range(args.streams):
                for team in ("on", "off"):
                    seen[team].append(one_stream(client, url, "k-" + team))
    rows = []
    for team in ("on", "off"):
        firsts = [f * 1000 for f, _ in seen[team]]
        ends = [e * 1000 for _, e in seen[team]]
        rows.append((team, statistics.median(firsts), max(firsts), statistics.median(ends)))
    upstream_first = FIRST_TOKEN_DELAY_S * 1000
    table = [
        f"{args.streams} streams each, alternating; the fake model's first token after "
        f"{upstream_first:.0f} ms, its recall call's arguments 200 ms more.",
        "",
        "| recall tool | first token, median ms | first token, max ms | whole answer, median ms |",
        "|---|---|---|---|",
        *(f"| {t} | {m:.1f} | {x:.1f} | {e:.1f} |" for t, m, x, e in rows),
        "",
        f"first token with the tool / without it: {rows[0][1] / rows[1][1]:.2f}x (median)",
    ]
    print("\n".join(table))
    if not args.no_write:
        command = "python tests/bench/bench_recall_stream.py " + " ".join(argv or sys.argv[1:])
        write_doc_section(
            DOC, (BEGIN, END), "Recall: a stream's first token", command, "\n".join(table)
        )


if __name__ == "__main__":
    main()
