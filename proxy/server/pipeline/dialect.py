"""What an API must tell the pipeline (pipeline.py): a dialect. The pipeline runs the same
steps for every API; a dialect says only what differs: how its body is read and checked,
turned into the planner's neutral messages and written back, where it goes, how its
stream is tapped and its errors and answers are read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from starlette.datastructures import Headers
from starlette.responses import Response

from proxy.recall import with_tool
from proxy.server.pipeline.body_limits import check_counts
from proxy.server.pipeline.plan_step import off_loop

if TYPE_CHECKING:
    from proxy.planner import PlanOutcome
    from proxy.policy import Policy, PolicySet
    from proxy.server.core.services import Services
    from proxy.server.pipeline.exchange import Exchange
    from proxy.server.pipeline.recall_step import RecallRun
    from proxy.summaries import Lookup, SummaryTarget
    from proxy.upstream import StreamTap


class Neutral(Protocol):
    """A body as the planner reads it: chat messages (`body`), and whether the reading
    found tags the write-back must remove (`tagged`)."""

    @property
    def body(self) -> dict[str, Any]: ...

    @property
    def tagged(self) -> bool: ...


@dataclass(slots=True)
class Flight:
    """One request's pieces as the pipeline takes them, step by step (the dialect reads
    what it needs): each is set once, by the step that makes it."""

    raw: bytes
    body: dict[str, Any] = field(default_factory=dict)
    entries: int = 0  # messages or items, and their parts (body_limits.check_counts)
    big: bool = False  # converted, planned and written back in a worker thread
    neutral: Neutral | None = None
    cached: Lookup | None = None  # summaries made earlier for this conversation
    outcome: PlanOutcome | None = None
    payload: bytes = b""
    client_wants_usage: bool = False  # a chat stream whose client asked for usage itself
    recall: RecallRun | None = None  # the recall tool went in the payload (recall_step.py)

    def declared(self, api: str) -> dict[str, Any]:
        """The client's body, with the recall tool after its own when it goes along."""
        return with_tool(self.body, api) if self.recall is not None else self.body


class Dialect(Protocol):
    """An API the pipeline serves."""

    api: str  # the usage rows' `api`
    summaries: bool  # whether its conversations get proxy summaries of dropped history

    def text_of(self, answer: dict[str, Any]) -> str:
        """An answer's generated text (to estimate usage when it reports none)."""
        ...

    def usage_of(self, usage: Any) -> Any:
        """An answer's usage, in chat's or the Responses API's names."""
        ...

    def error_event(self, message: str, kind: str, code: str) -> bytes:
        """The event a broken stream ends with."""
        ...

    def upstream_base(self, services: Services, policy: Policy) -> str:
        """Where the team's requests of this API go; raises when it goes nowhere (before
        a byte of the body is read)."""
        ...

    def parse(self, raw: bytes) -> dict[str, Any]:
        """The body, read and checked for this API's shape (a 400 otherwise)."""
        ...

    def count_entries(self, body: dict[str, Any], size: int) -> int:
        """Its messages or items and their parts, refused past body_limits' bounds."""
        ...

    def is_big(self, flight: Flight) -> bool: ...

    async def to_neutral(self, services: Services, team: str, flight: Flight) -> Neutral:
        """The body as the planner's neutral chat messages."""
        ...

    def after_plan(self, flight: Flight) -> None:
        """What the API adds to the plan's report (a note), if anything."""
        ...

    async def payload(self, services: Services, ex: Exchange, flight: Flight) -> bytes:
        """The bytes to send: the planned body written back in the API's shape, or the
        request's own bytes when nothing changed."""
        ...

    def target(
        self, services: Services, headers: Headers, policies: PolicySet, policy: Policy
    ) -> SummaryTarget:
        """The upstream URL, the headers and the timeouts."""
        ...

    def summary_target(
        self, services: Services, policy: Policy, target: SummaryTarget
    ) -> SummaryTarget:
        """Where summaries of this API's conversations are made (chat completions)."""
        ...

    def tap(self, flight: Flight) -> StreamTap:
        """A tap for the stream's events: their usage and text."""
        ...

    def answer_failure(self, response: Response, ex: Exchange) -> Response:
        """The proxy's error answer in the API's own shape."""
        ...


class DialectBase:
    """What most dialects do alike: they go to the team's OpenAI-compatible upstream, read
    `messages`, report usage in chat's or Responses' names, add nothing to the plan, make
    summaries at the request's own target, and answer errors in OpenAI's shape. A dialect
    names its reader (`reader`: the body to neutral messages), and says the rest."""

    summaries = True
    reader: Callable[[dict[str, Any]], Neutral] | None = None

    def upstream_base(self, services: Services, policy: Policy) -> str:
        return services.settings.openai_base(policy)

    def count_entries(self, body: dict[str, Any], size: int) -> int:
        return check_counts(body["messages"], "messages", size)

    def usage_of(self, usage: Any) -> Any:
        return usage

    def after_plan(self, flight: Flight) -> None:
        return None

    async def to_neutral(self, services: Services, team: str, flight: Flight) -> Neutral:
        """The body read by `reader`, in a worker thread when the body is big."""
        reader = type(self).reader
        assert reader is not None
        if flight.big:
            return await off_loop(services, team, reader, flight.body)
        return reader(flight.body)

    def summary_target(
        self, services: Services, policy: Policy, target: SummaryTarget
    ) -> SummaryTarget:
        return target

    def answer_failure(self, response: Response, ex: Exchange) -> Response:
        return response


async def written_back(
    services: Services, ex: Exchange, flight: Flight, write: Callable[..., bytes], *args: Any
) -> bytes:
    """The planned body in its API's shape (`write(*args)`), in a worker thread when the
    body is big; the request's own bytes when the plan changed nothing and no tag is to
    be removed."""
    assert flight.outcome is not None and flight.neutral is not None and ex.policy is not None
    if not (flight.outcome.changed or flight.neutral.tagged):
        return flight.raw
    if flight.big:
        return await off_loop(services, ex.policy.team, write, *args)
    return write(*args)
