"""A generated technical Q&A set for bench_quality.py: short questions, long answers.

Each conversation is a user asking an assistant short questions about one system after
another, each answered at length (about 350 tokens: steps, settings, caveats), every answer
holding a setting of its own (a made-up option name and value). The conversations are
replayed question by question (what the client resends each turn), and after each one come
questions about the setting an early answer gave ("what value did you suggest for ...?"):
their evidence is that answer, kept when the option and its value survive.

Deterministic (a seeded generator): the same set on every machine, no data file.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from quality_sets import Evidence, Msg, Point, Stream

SYSTEM = "You are a senior engineer answering questions about infrastructure precisely."
TURNS = (12, 16, 24)
CONVERSATIONS = 4  # per length
ASKED_BACK = 3  # questions about the first answers, after each conversation

SUBJECTS = (
    ("connection pooling", "PostgreSQL", "pool", "connections"),
    ("liveness probes", "Kubernetes", "probe", "restarts"),
    ("log rotation", "logrotate", "rotation", "archives"),
    ("TLS session resumption", "nginx", "session", "handshakes"),
    ("consumer lag", "Kafka", "consumer", "partitions"),
    ("query planning", "MySQL", "planner", "indexes"),
    ("build caching", "Bazel", "cache", "actions"),
    ("garbage collection pauses", "the JVM", "collector", "heap"),
    ("eviction policies", "Redis", "eviction", "keys"),
    ("rate limiting", "Envoy", "limiter", "tokens"),
    ("snapshot scheduling", "ZFS", "snapshot", "datasets"),
    ("autoscaling", "Kubernetes", "autoscaler", "replicas"),
    ("write-ahead logging", "SQLite", "journal", "checkpoints"),
    ("DNS caching", "systemd-resolved", "resolver", "lookups"),
    ("backpressure", "gRPC streams", "window", "messages"),
    ("shard rebalancing", "Elasticsearch", "allocator", "shards"),
    ("cron drift", "systemd timers", "timer", "jobs"),
    ("memory limits", "Docker", "cgroup", "containers"),
    ("retry budgets", "a service mesh", "retry", "requests"),
    ("vacuuming", "PostgreSQL", "autovacuum", "tables"),
    ("compaction", "Cassandra", "compaction", "sstables"),
    ("hot reloading", "HAProxy", "reload", "workers"),
    ("queue visibility timeouts", "SQS", "visibility", "messages"),
    ("disk scheduling", "Linux", "scheduler", "writes"),
    ("secret rotation", "Vault", "lease", "credentials"),
    ("cache warming", "Varnish", "warmer", "objects"),
)
ASKING = (
    "How should I tune {topic} in {system}?",
    "What is a good setup for {topic} with {system}?",
    "Any advice on {topic} for {system} under load?",
    "How do I get {topic} right in {system}?",
    "We see trouble with {topic} on {system}. What would you change?",
)
STEPS = (
    "First, measure before changing anything: record how the {noun} behaves over a full "
    "day of traffic, with peaks, and keep the numbers so you can compare later.",
    "Look at the defaults {system} ships with; they are chosen for small installations, "
    "and most production {things} outgrow them within weeks.",
    "Change one setting at a time and watch the effect for at least an hour, because the "
    "{noun} reacts slowly and two changes together hide which one helped.",
    "Keep the configuration in version control next to the deployment manifests, so that "
    "a rollback of the {noun} is one revert and not an archaeology project.",
    "Alert on the trend rather than on single spikes: a {noun} that degrades slowly is "
    "the usual cause of incidents with {things}, and spikes are mostly noise.",
    "Document why each value was picked, with the measurement behind it, so the next "
    "person who touches {topic} does not undo the tuning by accident.",
    "Test the failure path as well: kill a node during a load test and check that the "
    "{noun} recovers without manual work and without losing {things}.",
    "Be careful with very aggressive values: they look good in benchmarks but under a "
    "burst of {things} they make {system} spend its time on bookkeeping.",
)
SETTING = (
    "The one setting that matters most here is `{option}`: set it to {value} for your "
    "size, and revisit it when the number of {things} doubles."
)
CAVEATS = (
    "A common mistake is to raise every limit at once; that only moves the bottleneck.",
    "Remember that metrics from a staging environment rarely match production traffic.",
    "If you run several instances, make sure they share the same values, or the one with "
    "the lowest limit will take the blame for the others.",
    "Upgrades sometimes change the defaults silently, so pin the values you rely on.",
)
ASKED_BACK_TEXT = (
    "Going back to your answer about {topic} in {system}: what value did you suggest "
    "for `{option}`?"
)


@dataclass
class Answered:
    topic: str
    system: str
    option: str
    value: str
    answer: int  # the answer's index in the messages


def _answer(rng: random.Random, subject: tuple[str, str, str, str], option: str, value: str) -> str:
    topic, system, noun, things = subject
    fill = {"topic": topic, "system": system, "noun": noun, "things": things}
    steps = rng.sample(STEPS, 7)
    lines = [f"For {topic} in {system}, this is what I would do."]
    for n, step in enumerate(steps[:3], 1):
        lines.append(f"{n}. {step.format(**fill)}")
    lines.append(SETTING.format(option=option, value=value, things=things))
    for n, step in enumerate(steps[3:], 4):
        lines.append(f"{n}. {step.format(**fill)}")
    lines.extend(rng.sample(CAVEATS, 2))
    lines.append(
        f"In short: measure the {noun}, change one value at a time, and keep `{option}` "
        f"where the measurements put it."
    )
    return "\n\n".join(lines)


def conversation(rng: random.Random, turns: int) -> tuple[list[Msg], list[Answered]]:
    subjects = rng.sample(SUBJECTS, turns)
    messages: list[Msg] = [{"role": "system", "content": SYSTEM}]
    answered: list[Answered] = []
    for subject in subjects:
        topic, system, noun, _ = subject
        kind = rng.choice(("max", "min", "idle", "burst", "grace"))
        option = f"{noun}_{kind}_{rng.choice(('ms', 'count', 'ratio', 'size'))}"
        value = str(rng.randrange(3, 9000))
        question = rng.choice(ASKING).format(topic=topic, system=system)
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": _answer(rng, subject, option, value)})
        answered.append(Answered(topic, system, option, value, len(messages) - 1))
    return messages, answered


def techqa(limit: int = 0) -> list[Stream]:
    rng = random.Random(20261127)
    streams: list[Stream] = []
    questions: list[Point] = []
    for turns in TURNS:
        for c in range(CONVERSATIONS):
            messages, answered = conversation(rng, turns)
            replay = [
                Point({"model": "gpt-4o", "messages": messages[: k + 1]})
                for k in range(1, len(messages))
                if messages[k]["role"] == "user"
            ]
            streams.append(Stream(f"techqa/{turns}/{c}", replay))
            for a in answered[:ASKED_BACK]:
                ask = ASKED_BACK_TEXT.format(topic=a.topic, system=a.system, option=a.option)
                asked = {"role": "user", "content": ask}
                body = {"model": "gpt-4o", "messages": [*messages, asked]}
                ev = [Evidence(a.answer, (a.option, a.value))]
                questions.append(Point(body, ev, scored=True))
    streams = streams[: limit or None]
    streams.append(
        Stream("techqa/questions", questions[: limit * ASKED_BACK or None], replay=False)
    )
    return streams
