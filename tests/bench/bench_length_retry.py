"""Length refusals on the Claude Code set: every decision point of ../shared/data/claude-code
(Messages bodies of real Claude Code sessions, `max_tokens` 4,096, the set's window of
40,000), sent through the proxy to a fake Anthropic upstream that counts more than the
proxy's estimate (tests/fake_window.py: cl100k times CLAUDE_SCALE over the body as sent,
an image 1,600) and refuses what passes its window as Anthropic does ("prompt is too long").

Usage: python tests/bench/bench_length_retry.py [--scale S] [--no-write]

Two runs: every point to a proxy of its own (nothing learned: each point is a first
request), and all points in order to one proxy (what a refusal teaches serves the points
after it). For each: points answered, sent once, sent twice (refused, planned again and
answered), and refused to the client. Results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from procs import write_doc_section  # noqa: E402
from quality_sets import DATA  # noqa: E402

from proxy.server.app.app import create_app  # noqa: E402
from proxy.server.core.settings import Settings  # noqa: E402
from tests import fake_window  # noqa: E402
from tests.conftest import serve  # noqa: E402
from tests.fake_upstream import FakeUpstream  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench_length_retry: begin -->", "<!-- bench_length_retry: end -->"
WINDOW = 40_000
MAX_TOKENS = 4_096


def points() -> list[tuple[str, dict[str, Any]]]:
    """Each decision point's Messages body, in the set's order."""
    folder = DATA / "claude-code"
    runs = {}
    for line in (folder / "trajectories.jsonl").read_bytes().splitlines():
        run = orjson.loads(line)
        runs[run["id"]] = run
    out = []
    for line in (folder / "cases.jsonl").read_bytes().splitlines():
        case = orjson.loads(line)
        run = runs[case["traj"]]
        body = {"model": run["model"], "max_tokens": MAX_TOKENS, "tools": run["tools"],
                "messages": run["messages"][: case["n"]]}  # fmt: skip
        out.append((case["id"], body))
    return out


@contextmanager
def proxy(base: str, models: set[str]) -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "policies"
        policies.mkdir()
        windows = "".join(f"  {m}: {{context_window: {WINDOW}}}\n" for m in sorted(models))
        (policies / "default.yaml").write_text(
            f"upstream: {{anthropic: {{base_url: '{base}'}}}}\nmodels:\n{windows}"
        )
        settings = Settings(
            policies=str(policies), upstream=base + "/v1", usage_log=str(Path(tmp) / "u.jsonl"),
            watch_policies=False,
        )  # fmt: skip
        with serve(create_app(settings)) as url:
            yield url


def send(url: str, upstream: FakeUpstream, body: dict[str, Any]) -> tuple[int, int, int]:
    """The client's status, the upstream requests it took, and the proxy's count sent."""
    before = len(upstream.requests)
    reply = httpx.post(url + "/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=120)
    return (
        reply.status_code,
        len(upstream.requests) - before,
        int(reply.headers.get("x-context-tokens-after", "0")),
    )


def tally(results: list[tuple[int, int, int]]) -> tuple[int, int, int, int]:
    answered = sum(s == 200 for s, _, _ in results)
    once = sum(s == 200 and n == 1 for s, n, _ in results)
    twice = sum(s == 200 and n == 2 for s, n, _ in results)
    return answered, once, twice, len(results) - answered


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--scale", type=float, default=fake_window.CLAUDE_SCALE)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    fake_window.CLAUDE_SCALE = args.scale
    cases = points()
    models = {body["model"] for _, body in cases}
    upstream = FakeUpstream()
    fresh: list[tuple[int, int, int]] = []
    learned: list[tuple[int, int, int]] = []
    with serve(upstream.app()) as base:
        upstream.window = WINDOW
        for _, body in cases:
            with proxy(base, models) as url:
                fresh.append(send(url, upstream, body))
        with proxy(base, models) as url:
            learned = [send(url, upstream, body) for _, body in cases]
    rows = [("each point first (nothing learned)", tally(fresh)),
            ("in order, one proxy (learned)", tally(learned))]  # fmt: skip
    held = next(i for i, (name, _) in enumerate(cases) if name.endswith("a79e8577-088e-4020-be7a-d941574b478c/ctx0#step060"))  # fmt: skip
    table = [
        f"{len(cases)} decision points; the upstream counts cl100k x {args.scale} over the body "
        f"as sent (the proxy: cl100k x 1.25 and Anthropic's rules, calibrated from answers); "
        f"window {WINDOW:,}, max_tokens {MAX_TOKENS:,}.",
        "",
        "| run | answered | sent once | refused, planned again, answered | refused to the client |",
        "|---|---|---|---|---|",
        *(f"| {name} | {a} | {o} | {t} | {r} |" for name, (a, o, t, r) in rows),
        "",
        f"The point of step 60 of the 119-message session (a79e8577): status {fresh[held][0]}, "
        f"{fresh[held][1]} upstream request(s), {fresh[held][2]:,} tokens as the proxy counted "
        "what it sent last.",
    ]
    print("\n".join(table))
    if not args.no_write:
        command = "python tests/bench/bench_length_retry.py " + " ".join(argv or sys.argv[1:])
        write_doc_section(
            DOC, (BEGIN, END), "Length refusals on the Claude Code set", command, "\n".join(table)
        )


if __name__ == "__main__":
    main()
