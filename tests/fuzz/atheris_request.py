"""Coverage-guided fuzzing of the request parser and the planner with atheris (on demand).

    pip install atheris
    python tests/fuzz/atheris_request.py -max_total_time=120 [corpus_dir]

Any exception other than a ProxyError with a 4xx status is a crash: the server would turn
it into a 500. Bytes are fed as a raw body, and also wrapped into a chat-completion whose
message text is the fuzzer's string (so tags, headings and odd unicode reach the planner).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    import orjson

    from proxy.errors import ProxyError
    from proxy.planner import Kept
    from proxy.planner.request import plan_request
    from proxy.policy.model import ModelPolicy, Policy
    from proxy.relevance.scoring import TermIndex
    from proxy.server.pipeline.request_body import parse_chat_body
    from proxy.tokens.counter import TokenCounter

POLICY = Policy(models={"gpt-4o": ModelPolicy(context_window=400)})
COUNTER = TokenCounter()
TOKENIZER = COUNTER.for_model("gpt-4o", POLICY)
TERMS = TermIndex()


def plan(raw: bytes) -> None:
    try:
        body = parse_chat_body(raw)
        plan_request(body, POLICY, COUNTER.for_model(body["model"], POLICY), 400, kept=Kept(TERMS))
    except ProxyError as exc:
        if not 400 <= exc.status < 500:
            raise


def one_input(data: bytes) -> None:
    plan(data)
    fdp = atheris.FuzzedDataProvider(data)
    texts = [fdp.ConsumeUnicodeNoSurrogates(200) for _ in range(fdp.ConsumeIntInRange(1, 8))]
    roles = ["system", "user", "assistant", "user"]
    messages = [{"role": roles[i % 4], "content": t} for i, t in enumerate(texts)]
    messages.append({"role": "user", "content": fdp.ConsumeUnicodeNoSurrogates(50)})
    plan(orjson.dumps({"model": "gpt-4o", "messages": messages}))


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
