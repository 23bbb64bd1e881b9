"""Policy files: YAML -> validated Policy objects, with FILE:LINE errors for every problem."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from proxy.policy.keys import SPECIAL, TOP_LEVEL, build_policy
from proxy.policy.model import Policy
from proxy.policy.policy_set import PolicySet
from proxy.policy.schema import Problems, check_mapping

BUILT_IN_SOURCE = "<built-in default>"
TEAM_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class PolicyError(Exception):
    """One or more policy files are invalid; `problems` are `FILE:LINE: message` lines."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_policy_text(text: str, source: str, name: str) -> Policy:
    """One policy from YAML text; raises PolicyError listing every problem."""
    problems = Problems(source)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        # Where what went wrong began (an unclosed brace or quote, a key without its
        # colon), which the parser names as its context; it notices only a line later.
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        reason = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        said = f"{reason} ({context})" if context else reason
        raise PolicyError([f"{source}:{line}: invalid YAML: {said}"]) from None
    if node is None:  # an empty file is a valid policy: every default applies
        return Policy(name=name, team=name, source=source)
    values = check_mapping(node, TOP_LEVEL, problems, SPECIAL)
    policy = build_policy(values, source, name)
    if not problems.lines:  # a typo'd key would make a second, wrong problem here
        _check_relations(policy, node, problems)
    problems.raise_if_any(PolicyError)
    return policy


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
    if not TEAM_NAME.fullmatch(policy.team):
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
