"""What a policy file may say: every key with its check, and the checked values as a Policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import yaml

from proxy.policy.list_fields import key_hash, route_list, string_list
from proxy.policy.model import (
    DEFAULT_HEADINGS,
    DEFAULT_PASSTHROUGH,
    DEFAULT_SECTIONS,
    AnthropicUpstreamPolicy,
    BudgetPolicy,
    CachePolicy,
    HistoryPolicy,
    ModelPolicy,
    Policy,
    QuotaPolicy,
    RateLimitPolicy,
    RecallPolicy,
    SectionPolicy,
    SummaryPolicy,
    TagsPolicy,
    ThresholdPolicy,
    ToolsPolicy,
    UpstreamPolicy,
    VisibilityPolicy,
)
from proxy.policy.schema import (
    Field,
    Problems,
    check_mapping,
    enum_of,
    nonneg_int,
    nonneg_number,
    opt,
    positive_int,
    positive_number,
    ratio,
    share,
    string,
    url,
    yes_no,
)
from proxy.types import Overflow, Priority, Section, Strategy

SECTION_FIELDS: dict[str, Field] = {
    "ratio": ratio,
    "priority": enum_of(Priority),
    "overflow": enum_of(Overflow),
    "strategy": enum_of(Strategy),
}
TOP_LEVEL: dict[str, Field] = {
    "team": string,
    "keys": key_hash,
    "admin_keys": key_hash,
    "metrics": enum_of(("admin", "public")),
    "passthrough": route_list,
    "upstream": {
        "base_url": opt(url),
        "api_key_env": opt(string),
        "timeout_s": positive_number,
        "connect_timeout_s": positive_number,
        "retries": nonneg_int,
        "anthropic": {"base_url": opt(url), "api_key_env": opt(string)},
    },
    "budget": {
        "ratio": ratio,
        "reserve_output": yes_no,
        "on_required_overflow": enum_of(("reject", "truncate")),
    },
    "default_context_window": opt(positive_int),
    "models": "models",
    "sections": "sections",
    "headings": "headings",
    "history": {
        "keep_recent": nonneg_int,
        "relevance": enum_of(("bm25", "off"), true="bm25", false="off"),
        "neighbors": nonneg_int,
    },
    "tools": {
        "keep_recent": nonneg_int,
        "clear": yes_no,
        "clear_min_tokens": nonneg_int,
        "exclude": string_list,
    },
    "thresholds": {"warning": ratio, "critical": ratio},
    "quotas": {
        "daily_tokens": opt(positive_int),
        "monthly_tokens": opt(positive_int),
        "hard_limit": yes_no,
        "daily_usd": opt(positive_number),
        "monthly_usd": opt(positive_number),
        "answer_hold_tokens": nonneg_int,
    },
    "rate_limits": {
        "requests_per_minute": opt(positive_int),
        "tokens_per_minute": opt(positive_int),
        "key_requests_per_minute": opt(positive_int),
        "key_tokens_per_minute": opt(positive_int),
    },
    "visibility": {"prompt_report": yes_no},
    "tags": {"inline_in_user": yes_no},
    "summaries": {
        "enabled": yes_no,
        "model": opt(string),
        "max_tokens": positive_int,
        "store": opt(string),
        "concurrency": positive_int,
        "daily_token_cap": opt(positive_int),
        "chunk_turns": positive_int,
    },
    "cache": {
        "enabled": yes_no,
        "chats": yes_no,
        "watermark": ratio,
        "recall_share": ratio,
        "recall_floor": nonneg_number,  # a z-score (standout.py), not a share
        "agent_watermark": ratio,
        "agent_recall_share": share,
    },
    "recall": {
        "tool": enum_of(("auto", "on", "off"), true="on", false="off"),
        "max_tokens": positive_int,
        "rounds": nonneg_int,
    },
}


def _models(node: yaml.Node, problems: Problems) -> dict[str, ModelPolicy]:
    fields: dict[str, Field] = {
        "context_window": opt(positive_int),
        "tokenizer": opt(string),
        "input_usd_per_mtok": opt(nonneg_number),
        "output_usd_per_mtok": opt(nonneg_number),
        "cached_usd_per_mtok": opt(nonneg_number),
    }
    out: dict[str, ModelPolicy] = {}
    if not isinstance(node, yaml.MappingNode):
        problems.add(node, "models must be a mapping of model name to settings")
        return out
    for key_node, value_node in node.value:
        values = check_mapping(value_node, fields, problems, {}, f"models.{key_node.value}.")
        out[str(key_node.value)] = ModelPolicy(**values)
    return out


def _sections(node: yaml.Node, problems: Problems) -> dict[Section, SectionPolicy]:
    out = dict(DEFAULT_SECTIONS)
    if not isinstance(node, yaml.MappingNode):
        problems.add(node, "sections must be a mapping of section name to settings")
        return out
    known = ", ".join(s.value for s in Section)
    for key_node, value_node in node.value:
        try:
            section = Section(key_node.value)
        except ValueError:
            problems.add(key_node, f"unknown section {key_node.value!r} (known: {known})")
            continue
        values = check_mapping(
            value_node, SECTION_FIELDS, problems, {}, f"sections.{section.value}."
        )
        out[section] = replace(DEFAULT_SECTIONS[section], **values)
    return out


def _headings(node: yaml.Node, problems: Problems) -> dict[str, Section]:
    out = dict(DEFAULT_HEADINGS)
    if not isinstance(node, yaml.MappingNode):
        problems.add(node, "headings must map a heading title to a section name")
        return out
    for key_node, value_node in node.value:
        try:
            out[str(key_node.value).strip().lower()] = Section(value_node.value)
        except (ValueError, TypeError):
            problems.add(value_node, f"unknown section {value_node.value!r} for a heading")
    return out


SPECIAL: dict[str, Callable[[yaml.Node, Problems], Any]] = {
    "models": _models,
    "sections": _sections,
    "headings": _headings,
}


# The sub-policies a file may set, by their key; each is built from its checked fields.
_SUB_POLICIES: dict[str, Any] = {
    "upstream": UpstreamPolicy,
    "budget": BudgetPolicy,
    "history": HistoryPolicy,
    "tools": ToolsPolicy,
    "thresholds": ThresholdPolicy,
    "quotas": QuotaPolicy,
    "rate_limits": RateLimitPolicy,
    "visibility": VisibilityPolicy,
    "tags": TagsPolicy,
    "summaries": SummaryPolicy,
    "cache": CachePolicy,
    "recall": RecallPolicy,
}


def build_policy(values: dict[str, Any], source: str, name: str) -> Policy:
    upstream = dict(values.get("upstream", {}))
    upstream["anthropic"] = AnthropicUpstreamPolicy(**upstream.get("anthropic", {}))
    values = {**values, "upstream": upstream}
    subs = {key: cls(**values.get(key, {})) for key, cls in _SUB_POLICIES.items()}
    return Policy(
        name=name,
        team=values.get("team", name),
        source=source,
        keys=tuple(values.get("keys", ())),
        admin_keys=tuple(values.get("admin_keys", ())),
        metrics=values.get("metrics", "admin"),
        passthrough=tuple(values.get("passthrough", DEFAULT_PASSTHROUGH)),
        default_context_window=values.get("default_context_window"),
        models=MappingProxyType(values.get("models", {})),
        sections=MappingProxyType(values.get("sections", dict(DEFAULT_SECTIONS))),
        headings=MappingProxyType(values.get("headings", dict(DEFAULT_HEADINGS))),
        **subs,
    )
