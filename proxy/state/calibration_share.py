"""The count calibration shared by the fleet: every replica adds the answers it saw per
estimated model and its worst ratio, and installs the fleet's, so that a new replica counts
Claude as well as the ones that served it for a week (proxy/tokens/calibration.py)."""

from __future__ import annotations

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
        for model, (samples, worst) in taken.items():
            key = PREFIX + model
            pipe.hincrby(key, "samples", samples)
            pipe.hset(key, f"worst:{replica}", repr(worst))
            pipe.expire(key, KEEP_S)
            pipe.sadd(MODELS_KEY, model)
        pipe.expire(MODELS_KEY, KEEP_S)
        await pipe.execute()
        models = sorted(await client.smembers(MODELS_KEY))[:MAX_MODELS]
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
        samples = int(figures.get("samples", "0"))
        worst = max((float(v) for k, v in figures.items() if k.startswith("worst:")), default=0.0)
        counter.install_calibration(name, samples, worst)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
