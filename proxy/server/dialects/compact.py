"""OpenAI's compaction (POST /v1/responses/compact) as a dialect of the pipeline: a
Responses body (its `input` items, `instructions`, `previous_response_id`) fitted to the
window like any Responses request, sent to the upstream's `/responses/compact`, answered
with the compacted items and the pass's usage (a usage row with `api: "compact"`, held
and charged against the team's quotas like any request). Never streamed; the proxy's own
recall tool and summaries stay out of it (a compaction pass answers with items, not with
a turn the proxy could continue)."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers

from proxy.errors import InvalidRequest
from proxy.policy import Policy, PolicySet
from proxy.server.core.services import Services
from proxy.server.dialects.responses import Responses
from proxy.server.pipeline.forward_step import upstream_target
from proxy.summaries import SummaryTarget


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
