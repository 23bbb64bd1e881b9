"""Policy files: YAML -> validated Policy objects, with FILE:LINE errors for every problem."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from proxy.policy.model import (
    DEFAULT_HEADINGS,
    DEFAULT_SECTIONS,
    BudgetPolicy,
    CachePolicy,
    HistoryPolicy,
    ModelPolicy,
    Policy,
    PolicySet,
    QuotaPolicy,
    SectionPolicy,
    SummaryPolicy,
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
    key_hash,
    nonneg_int,
    nonneg_number,
    opt,
    positive_int,
    positive_number,
    ratio,
    share,
    string,
    string_list,
    url,
    yes_no,
)
from proxy.types import Overflow, Priority, Section, Strategy

BUILT_IN_SOURCE = "<built-in default>"


class PolicyError(Exception):
    """One or more policy files are invalid; `problems` are `FILE:LINE: message` lines."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


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
    "upstream": {
        "base_url": opt(url),
        "api_key_env": opt(string),
        "timeout_s": positive_number,
        "connect_timeout_s": positive_number,
        "retries": nonneg_int,
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
    },
    "visibility": {"prompt_report": yes_no},
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
        "watermark": ratio,
        "recall_share": ratio,
        "recall_reserve": ratio,
        "recall_floor": nonneg_number,  # a z-score (standout.py), not a share
        "recall_full": nonneg_number,
        "agent_watermark": ratio,
        "agent_recall_share": share,
    },
}


def load_policy_text(text: str, source: str, name: str) -> Policy:
    """One policy from YAML text; raises PolicyError listing every problem."""
    problems = Problems(source)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        reason = getattr(exc, "problem", None) or str(exc)
        raise PolicyError([f"{source}:{line}: invalid YAML: {reason}"]) from None
    if node is None:  # an empty file is a valid policy: every default applies
        return Policy(name=name, team=name, source=source)
    values = check_mapping(node, TOP_LEVEL, problems, _SPECIAL)
    policy = _build(values, source, name)
    _check_relations(policy, node, problems)
    problems.raise_if_any(PolicyError)
    return policy


def _models(node: yaml.Node, problems: Problems) -> dict[str, ModelPolicy]:
    fields: dict[str, Field] = {"context_window": opt(positive_int), "tokenizer": opt(string)}
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


_SPECIAL: dict[str, Callable[[yaml.Node, Problems], Any]] = {
    "models": _models,
    "sections": _sections,
    "headings": _headings,
}


def _build(values: dict[str, Any], source: str, name: str) -> Policy:
    def sub(key: str, cls: Any) -> Any:
        return cls(**values[key]) if key in values else cls()

    return Policy(
        name=name,
        team=values.get("team", name),
        source=source,
        keys=tuple(values.get("keys", ())),
        admin_keys=tuple(values.get("admin_keys", ())),
        upstream=sub("upstream", UpstreamPolicy),
        budget=sub("budget", BudgetPolicy),
        default_context_window=values.get("default_context_window"),
        models=MappingProxyType(values.get("models", {})),
        sections=MappingProxyType(values.get("sections", dict(DEFAULT_SECTIONS))),
        headings=MappingProxyType(values.get("headings", dict(DEFAULT_HEADINGS))),
        history=sub("history", HistoryPolicy),
        tools=sub("tools", ToolsPolicy),
        thresholds=sub("thresholds", ThresholdPolicy),
        quotas=sub("quotas", QuotaPolicy),
        visibility=sub("visibility", VisibilityPolicy),
        summaries=sub("summaries", SummaryPolicy),
        cache=sub("cache", CachePolicy),
    )


def _check_relations(policy: Policy, root: yaml.Node, problems: Problems) -> None:
    """Rules that span several fields, reported at the line of the block they concern."""
    total = sum(s.ratio for s in policy.sections.values())
    if total > 1.0 + 1e-9:
        node = _child(root, "sections") or root
        problems.add(node, f"section ratios sum to {total:.2f}, over 1; lower another section")
    if policy.thresholds.warning > policy.thresholds.critical:
        node = _child(root, "thresholds") or root
        problems.add(node, "thresholds.warning must not exceed thresholds.critical")
    for key in (k for k in ("watermark", "agent_watermark") if getattr(policy.cache, k) >= 1):
        node = _child(_child(root, "cache") or root, key) or root
        problems.add(node, f"cache.{key} must be below 1 (the cut moves in steps of 1 - it)")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", policy.team):
        node = _child(root, "team") or root
        problems.add(node, "team must be 1-64 letters, digits, '_', '-' or '.'")


def _child(node: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == key:
                return value_node  # type: ignore[no-any-return]
    return None


def load_policy_dir(directory: str | Path) -> PolicySet:
    """Every `*.yaml`/`*.yml` file in `directory`; `default.yaml` is the fallback team."""
    folder = Path(directory)
    if not folder.is_dir():
        return PolicySet(default=Policy(source=BUILT_IN_SOURCE))
    return load_policy_texts(*read_policy_dir(folder))


def read_policy_dir(folder: Path) -> tuple[dict[str, str], list[str]]:
    """The text of every policy file (by path), and a problem line for each unreadable one."""
    texts: dict[str, str] = {}
    problems: list[str] = []
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            texts[str(path)] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}:1: cannot read: {exc}")
    return texts, problems


def load_policy_texts(texts: dict[str, str], problems: list[str] | None = None) -> PolicySet:
    """The set from file texts keyed by path; raises PolicyError listing every problem."""
    problems = list(problems or ())
    loaded: list[Policy] = []
    for source, text in texts.items():
        try:
            loaded.append(load_policy_text(text, source, Path(source).stem))
        except PolicyError as exc:
            problems.extend(exc.problems)
    problems.extend(_cross_file_problems(loaded))
    if problems:
        raise PolicyError(problems)
    default = next((p for p in loaded if p.name == "default"), Policy(source=BUILT_IN_SOURCE))
    others = tuple(p for p in loaded if p is not default)
    return PolicySet(default=default, policies=others)


def _cross_file_problems(policies: list[Policy]) -> list[str]:
    problems: list[str] = []
    teams: dict[str, str] = {}
    keys: dict[str, str] = {}
    for policy in policies:
        if policy.team in teams:
            problems.append(
                f"{policy.source}:1: team {policy.team!r} is also defined in {teams[policy.team]}"
            )
        teams.setdefault(policy.team, policy.source)
        for key in policy.keys:
            if key.lower() in keys and keys[key.lower()] != policy.source:
                problems.append(f"{policy.source}:1: a key is also listed in {keys[key.lower()]}")
            keys.setdefault(key.lower(), policy.source)
    return problems
