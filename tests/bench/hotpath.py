"""Benchmark step 5: the proxy's CPU per small request beyond the relay's, by pipeline step.

Run: /work/venv/bin/python tests/bench/profile_proxy.py --raw /tmp/p.txt [--stream]
     /work/venv/bin/python tests/bench/profile_proxy.py --relay --raw /tmp/r.txt [--stream]
     /work/venv/bin/python tests/bench/hotpath.py /tmp/p.txt /tmp/r.txt [--stream]

Reads py-spy's collapsed stacks of both (recorded with --threads) and the main thread's
CPU per request that profile_proxy.py measured from /proc (results/profile_*.json), and
turns each main-thread sample into microseconds per request. A sample goes to the step of
its deepest frame that names one (the proxy's own steps first, so the time aiohttp spends
inside the proxy's upstream call is the upstream call's); what names none is the server
itself (uvicorn, starlette, the event loop), which both pay (the proxy's own Response classes send as starlette's do: the sending is
counted there too, the header building apart).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from profile_proxy import main_thread_lines  # noqa: E402

SERVER = "server: uvicorn, starlette, event loop, response send"
# (fragment of a frame name, step); the deepest matching frame of a stack wins.
PROXY_STEPS = [
    ("new_request_id", "request id"),
    ("resolve_policy", "policy lookup, auth"),
    ("headers_not_forwarded", "policy lookup, auth"),
    ("upstream_authorization", "policy lookup, auth"),
    ("read_body", "body read"),
    ("parse_chat_body", "body parse (orjson), model check"),
    ("checked_model", "body parse (orjson), model check"),
    ("check_quota", "quota check before sending"),
    ("tokenizer_for", "tokenizer lookup"),
    ("Summarizer.lookup", "summary cache lookup"),
    ("tag_marks", "<context> tag scan"),
    ("plan (proxy/server/plan_step.py)", "planning: count, window, budget, outcome"),
    ("forwarded_payload", "payload choice"),
    ("clean_headers", "upstream headers"),
    ("upstream_url", "upstream target"),
    ("Timeouts", "upstream target"),
    ("SummaryTarget", "upstream target"),
    ("cancel_on_disconnect", "disconnect watch"),
    ("Upstream.send", "upstream call (proxy wrapper + aiohttp)"),
    ("UpstreamResponse.read", "answer read"),
    ("UpstreamResponse.chunks", "upstream stream read"),
    ("UpstreamResponse.close", "upstream stream read"),
    ("finish_plain", "answer parse (orjson) for usage"),
    ("_answer_text", "answer parse (orjson) for usage"),
    ("estimate_completion", "completion estimate"),
    ("StreamTap", "SSE tap"),
    ("error_event", "SSE tap"),
    ("relay_stream", "stream relay generator"),
    ("Exchange.finish", "finish: record, rest"),
    ("QuotaBook.add", "finish: quota add"),
    ("QuotaBook.status", "finish: quota status"),
    ("utc_now_iso", "finish: usage row timestamp"),
    ("UsageRecord.__init__", "finish: usage row timestamp"),
    ("to_json_line", "finish: usage row JSON"),
    ("UsageLog.write", "finish: usage writer hand-off"),
    ("Metrics.", "finish: metrics"),
    ("_model_label", "finish: metrics model label"),
    ("ThresholdWatch.observe", "finish: thresholds"),
    ("context_headers", "x-context headers"),
    ("Exchange.level", "x-context headers"),
    ("_raw (proxy/server/responses.py)", "response headers build"),
    ("_header (proxy/server/responses.py)", "response headers build"),
    ("plain (proxy/server/responses.py)", "response headers build"),
    ("streamed (proxy/server/responses.py)", "response headers build"),
    ("Plain.__init__ (proxy/server/responses.py)", "response headers build"),
    ("Relayed.__init__ (proxy/server/responses.py)", "response headers build"),
    ("summarize_later", "summaries scheduling"),
    ("chat_completions", "handler (own lines)"),
    # Run from the event loop, outside the handler: the writer thread's wake-up (a futex).
    ("Event.set (threading.py)", "usage writer wake-up (Event.set)"),
    ("_start_head_timer", "connection limits: head timer"),
    ("_stop_head_timer", "connection limits: head timer"),
]
# Only when no proxy step matched: the relay's equivalents of the proxy's upstream steps.
RELAY_STEPS = [
    ("ClientSession._request", "upstream call (proxy wrapper + aiohttp)"),
    ("_RequestContextManager", "upstream call (proxy wrapper + aiohttp)"),
    ("ClientResponse.read", "answer read"),
    ("StreamReader.", "upstream stream read"),
    ("ChunkTupleAsyncStreamIterator", "upstream stream read"),
    ("AsyncStreamIterator", "upstream stream read"),
    ("ClientResponse.release", "upstream stream read"),
    ("Request.body", "body read"),
    ("Request.stream", "body read"),
]


def step_of(frames: list[str]) -> str:
    for steps in (PROXY_STEPS, RELAY_STEPS):
        for frame in reversed(frames):
            for fragment, step in steps:
                if fragment in frame:
                    return step
    return SERVER


def attribute(raw: Path, cpu_us: float) -> dict[str, float]:
    """Microseconds per request per step: the sample share times the main thread's CPU."""
    stacks, _ = main_thread_lines(raw)
    counts = Counter[str]()
    for frames, n in stacks:
        counts[step_of(frames)] += n
    total = max(sum(counts.values()), 1)
    return {step: cpu_us * n / total for step, n in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("proxy_raw", type=Path)
    parser.add_argument("relay_raw", type=Path)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    kind = "stream" if args.stream else "plain"
    measured = {}
    for who in ("", "relay_"):
        summary = orjson.loads((HERE / "results" / f"profile_{who}{kind}.json").read_bytes())
        measured[who] = float(summary["main_thread_cpu_us_per_request"])
    proxy = attribute(args.proxy_raw, measured[""])
    relay = attribute(args.relay_raw, measured["relay_"])
    print(
        f"{kind}: main-thread CPU per request {measured['']:.0f} µs (proxy) vs "
        f"{measured['relay_']:.0f} µs (relay), {measured[''] / measured['relay_']:.2f}×\n"
    )
    print("| step | proxy µs/req | relay µs/req | extra µs/req |\n|---|---|---|---|")
    steps = sorted(set(proxy) | set(relay), key=lambda s: -(proxy.get(s, 0) - relay.get(s, 0)))
    for step in steps:
        mine, floor = proxy.get(step, 0.0), relay.get(step, 0.0)
        print(f"| {step} | {mine:.0f} | {floor:.0f} | {mine - floor:+.0f} |")


if __name__ == "__main__":
    main()
