"""The count calibration shared by the fleet: every replica adds the answers it saw per
(upstream, model) and its own high ratio, and installs the fleet's, so that a new replica
counts Claude as well as the ones that served it for a week (proxy/tokens/calibration.py).
A replica's ratio is replaced each round (the fleet's comes down as its answers do) and
clamped to the family's band on the way in, whatever another process wrote."""

from __future__ import annotations

import math

from redis.asyncio import Redis

from proxy.tokens import TokenCounter

PREFIX = "cp:count:"
MODELS_KEY = PREFIX + "models"
KEEP_S = 30 * 24 * 3600  # a model nobody has called for a month is forgotten
MAX_MODELS = 256  # read back at most this many (model names come from clients)


async def share_calibration(client: Redis, counter: TokenCounter, replica: str) -> None:
    """One round: this replica's unsent answers in, the fleet's figures out. Raises what
    Redis raises; the answers taken are given back then, to go next round."""
    taken = counter.calibration.take_unsent()
    try:
        pipe = client.pipeline(transaction=False)
        for name, (samples, ratio) in taken.items():
            key = PREFIX + name
            pipe.hincrby(key, "samples", samples)
            pipe.hset(key, f"ratio:{replica}", repr(ratio))
            pipe.expire(key, KEEP_S)
            pipe.sadd(MODELS_KEY, name)
        pipe.expire(MODELS_KEY, KEEP_S)
        await pipe.execute()
        # at most MAX_MODELS read back, however many names the set holds
        found = await client.srandmember(MODELS_KEY, MAX_MODELS)
        models = found if isinstance(found, list) else []
    except BaseException:
        counter.calibration.give_back(taken)
        raise
    names = [_text(model) for model in models]
    if not names:
        return
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(PREFIX + name)
    for name, fields in zip(names, await pipe.execute(), strict=True):
        figures = {_text(k): _text(v) for k, v in fields.items()}
        samples = int(_number(figures.get("samples", "0")))
        ratios = [_number(v) for k, v in figures.items() if k.startswith("ratio:")]
        counter.install_calibration(name, samples, max(ratios, default=0.0))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(text: str) -> float:
    """A figure a replica wrote; 0 (ignored) for anything else found under the key."""
    try:
        value = float(text)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0
