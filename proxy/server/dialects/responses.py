"""The Responses API (POST /v1/responses) as a dialect of the pipeline: its `input` items
read into neutral chat messages for planning and written back as items; summaries of its
conversations made as chat completions at the same upstream. OpenAI's compaction
(POST /v1/responses/compact) is a variant of it: a Responses body fitted to the window like
any other, sent to the upstream's `/responses/compact`, answered with the compacted items
and the pass's usage (a usage row with `api: "compact"`, held and charged like any request).
Never streamed; the proxy's own recall tool and summaries stay out of it (a compaction pass
answers with items, not with a turn the proxy could continue)."""

from __future__ import annotations

import dataclasses
import logging
import traceback
from typing import Any

from starlette.datastructures import Headers

from proxy.errors import InvalidRequest
from proxy.items import Converted, output_text, to_chat, to_responses
from proxy.planner import PlanOutcome, unplanned
from proxy.policy import Policy, PolicySet
from proxy.server.core.services import Services
from proxy.server.pipeline.body_limits import INLINE_MAX_ITEMS, check_counts
from proxy.server.pipeline.dialect import DialectBase, Flight, written_back
from proxy.server.pipeline.exchange import Exchange
from proxy.server.pipeline.forward_step import upstream_target, upstream_url
from proxy.server.pipeline.plan_step import PLAN_INLINE_MAX_BYTES
from proxy.server.pipeline.request_body import check_responses_body, encoded, parse_model_body
from proxy.summaries import SummaryTarget
from proxy.upstream import ResponsesTap, StreamTap, response_error_event

PREVIOUS_NOTE = (
    "previous_response_id: the earlier turns live at the provider, not in this request; "
    "only what is sent is counted and trimmed"
)


class Responses(DialectBase):
    """Items read into neutral messages and written back; summaries as chat completions."""

    api = "responses"
    reader = staticmethod(to_chat)

    def text_of(self, answer: dict[str, Any]) -> str:
        return output_text(answer)

    def error_event(self, message: str, kind: str, code: str) -> bytes:
        return response_error_event(message, kind, code)

    def parse(self, raw: bytes) -> dict[str, Any]:
        return check_responses_body(parse_model_body(raw))

    def count_entries(self, body: dict[str, Any], size: int) -> int:
        return check_counts(body.get("input"), "input", size)

    def is_big(self, flight: Flight) -> bool:
        # Reading items and writing them back is linear but Python: past a megabyte or
        # INLINE_MAX_ITEMS items and parts it runs in a worker thread, like a big plan, so
        # that the event loop keeps serving.
        return len(flight.raw) > PLAN_INLINE_MAX_BYTES or flight.entries > INLINE_MAX_ITEMS

    def after_plan(self, flight: Flight) -> None:
        assert flight.outcome is not None
        note_previous(flight.body, flight.outcome)

    async def payload(self, services: Services, ex: Exchange, flight: Flight) -> bytes:
        conv = flight.neutral
        assert isinstance(conv, Converted)
        args = (services, ex, flight.raw, flight.declared(self.api), conv)
        payload = await written_back(services, ex, flight, forwarded, *args)
        flight.outcome = ex.outcome  # unplanned, if writing it back failed
        return payload

    def target(
        self, services: Services, headers: Headers, policies: PolicySet, policy: Policy
    ) -> SummaryTarget:
        return upstream_target(services, headers, policies, policy, "/responses")

    def summary_target(
        self, services: Services, policy: Policy, target: SummaryTarget
    ) -> SummaryTarget:
        # Summaries are chat completions, made at the same upstream with the same headers.
        return dataclasses.replace(target, url=upstream_url(services, policy, "/chat/completions"))

    def tap(self, flight: Flight) -> StreamTap:
        return ResponsesTap()


RESPONSES = Responses()


def forwarded(
    services: Services, ex: Exchange, raw: bytes, body: dict[str, Any], conv: Converted
) -> bytes:
    """The planned body's bytes; the request as it came if writing it back fails (a bug):
    like a failed plan, an untrimmed request may still fit, and the upstream's own error
    is better than the proxy's."""
    assert ex.outcome is not None and ex.policy is not None
    try:
        return encoded(rewritten(body, conv, ex.outcome))
    except InvalidRequest:
        raise  # the client's body, nested past what can be written back
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]  # the place only, never content
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}"
        logging.getLogger("context_proxy.plan").error(
            "writing the Responses body back failed: %s at %s (request %s, team %s)",
            type(exc).__name__,
            where,
            ex.request_id,
            ex.policy.team,
        )
        services.metrics.plan_failures.labels(ex.policy.team).inc()
        ex.outcome = unplanned(conv.body, ex.outcome.context_window, type(exc).__name__)
        return raw


def rewritten(body: dict[str, Any], conv: Converted, outcome: PlanOutcome) -> dict[str, Any]:
    """The Responses body to forward: as it came when the plan changed nothing."""
    if not outcome.changed and not conv.tagged:
        return body
    return to_responses(body, conv, outcome.body["messages"])


def note_previous(body: dict[str, Any], outcome: PlanOutcome) -> None:
    """With `previous_response_id` the provider prepends turns the proxy never sees: the
    plan says so (the count covers only what is sent)."""
    if body.get("previous_response_id") and PREVIOUS_NOTE not in outcome.problems:
        outcome.problems.append(PREVIOUS_NOTE)


def report_json(outcome: PlanOutcome, body: dict[str, Any]) -> dict[str, Any]:
    """The plan report, with the previous_response_id note when the body has one."""
    report = outcome.report.to_json()
    if body.get("previous_response_id") and PREVIOUS_NOTE not in report["problems"]:
        report["problems"].append(PREVIOUS_NOTE)
    return report


class Compact(Responses):
    api = "compact"
    summaries = False

    def parse(self, raw: bytes) -> dict[str, Any]:
        body = super().parse(raw)
        if body.get("stream") is True:
            raise InvalidRequest("A compaction is not streamed.", param="stream")
        return body

    def target(
        self, services: Services, headers: Headers, policies: PolicySet, policy: Policy
    ) -> SummaryTarget:
        return upstream_target(services, headers, policies, policy, "/responses/compact")


COMPACT = Compact()
