"""Policy files: defaults, validation with FILE:LINE messages, folders, the check command."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli.main import main
from proxy.policy.load import PolicyError, load_policy_dir, load_policy_text
from proxy.policy.model import Policy, hash_key
from proxy.types import Overflow, Priority, Section

GOOD = """\
team: research
keys: ["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
upstream: {base_url: "http://127.0.0.1:9000/v1", api_key_env: RESEARCH_UPSTREAM_KEY, timeout_s: 600}
budget: {ratio: 0.8, reserve_output: true, on_required_overflow: reject}
models:
  gpt-4o-mini: {context_window: 8192}
  my-llama: {context_window: 8192, tokenizer: tokenizers/llama3.json}
sections:
  memory: {ratio: 0.10, priority: high, overflow: truncate}
history: {keep_recent: 6, relevance: bm25}
thresholds: {warning: 0.80, critical: 0.90}
quotas: {daily_tokens: 5000000, monthly_tokens: null, hard_limit: false}
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(text, "p.yaml", "p")
    return caught.value.problems


def test_contract_example_loads() -> None:
    policy = load_policy_text(GOOD, "research.yaml", "research")
    assert policy.team == "research"
    assert policy.keys == (
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    )
    assert policy.upstream.base_url == "http://127.0.0.1:9000/v1"
    assert policy.upstream.api_key_env == "RESEARCH_UPSTREAM_KEY"
    assert policy.models["my-llama"].tokenizer == "tokenizers/llama3.json"
    assert policy.models["gpt-4o-mini"].context_window == 8192
    assert policy.quotas.daily_tokens == 5_000_000
    assert policy.sections[Section.MEMORY].priority is Priority.HIGH


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_file_is_default_policy(text: str) -> None:
    policy = load_policy_text(text, "x.yaml", "x")
    assert policy.team == "x"
    assert policy.budget.ratio == 0.8
    assert policy.sections == Policy().sections
    assert policy.history.keep_recent == 3


def test_section_override_keeps_other_fields() -> None:
    policy = load_policy_text("sections:\n  memory: {ratio: 0.05, overflow: drop}\n", "x.yaml", "x")
    assert policy.sections[Section.MEMORY].ratio == 0.05
    assert policy.sections[Section.MEMORY].overflow is Overflow.DROP
    assert policy.sections[Section.MEMORY].priority is Priority.HIGH


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("frobnicate: 1\n", "p.yaml:1: unknown key 'frobnicate'"),
        (
            "team: a\nbudget:\n  ratio: 1.5\n",
            "p.yaml:3: budget.ratio must be a ratio in (0, 1], got 1.5",
        ),
        ("budget: {ratio: 0}\n", "p.yaml:1: budget.ratio must be a ratio in (0, 1]"),
        ("budget: {ratio: '0.5'}\n", "p.yaml:1: budget.ratio must be a ratio in (0, 1], got '0.5'"),
        ("budget: {ratio: .nan}\n", "p.yaml:1: budget.ratio must be a finite number"),
        (
            "budget: {on_required_overflow: maybe}\n",
            "p.yaml:1: budget.on_required_overflow must be one of reject, truncate",
        ),
        ("budget: {reserve_output: 1}\n", "p.yaml:1: budget.reserve_output must be true or false"),
        ("budget: {wat: 1}\n", "p.yaml:1: unknown key budget.'wat'"),
        (
            "\n\nhistory: {keep_recent: -1}\n",
            "p.yaml:3: history.keep_recent must be an integer >= 0",
        ),
        ("history: {relevance: magic}\n", "p.yaml:1: history.relevance must be one of bm25, off"),
        (
            "models:\n  m: {context_window: 0}\n",
            "p.yaml:2: models.m.context_window must be a positive integer",
        ),
        (
            "models:\n  m: {context_window: 1.5}\n",
            "p.yaml:2: models.m.context_window must be a positive integer",
        ),
        ("models: [1]\n", "p.yaml:1: models must be a mapping"),
        ("sections:\n  memroy: {ratio: 0.1}\n", "p.yaml:2: unknown section 'memroy'"),
        ("sections:\n  memory: {ratio: 0.5}\n", "p.yaml:2: section ratios sum to 1.40, over 1"),
        (
            "sections:\n  memory: {priority: urgent}\n",
            "p.yaml:2: sections.memory.priority must be one of required, high, medium, low",
        ),
        (
            "thresholds: {warning: 0.95, critical: 0.9}\n",
            "p.yaml:1: thresholds.warning must not exceed thresholds.critical",
        ),
        ("keys: notalist\n", "p.yaml:1: keys must be a list"),
        (
            "keys:\n  - {label: ci}\n",
            "p.yaml:2: keys: an entry given as a mapping needs its `hash`",
        ),
        ("keys:\n  - {hash: x, owner: me}\n", "p.yaml:2: keys: unknown key 'owner'"),
        (
            "rate_limits: {requests_per_minut: 60}\n",
            "p.yaml:1: unknown key rate_limits.'requests_per_minut': did you mean",
        ),
        (
            "rate_limits: {tokens_per_minute: 0}\n",
            "p.yaml:1: rate_limits.tokens_per_minute must be a positive integer",
        ),
        ("keys: [sk-raw-key]\n", "p.yaml:1: keys: each entry must be 'sha256:' and 64 hex digits"),
        (
            "upstream: {base_url: ftp://x}\n",
            "p.yaml:1: upstream.base_url must be an http:// or https:// URL",
        ),
        ("upstream: {timeout_s: -1}\n", "p.yaml:1: upstream.timeout_s must be a positive number"),
        ("quotas: {daily_tokens: 0}\n", "p.yaml:1: quotas.daily_tokens must be a positive integer"),
        ("team: a\nteam: b\n", "p.yaml:2: duplicate key team"),
        ("team: 'bad name!'\n", "p.yaml:1: team must be"),
        ("- a\n- b\n", "p.yaml:1: the policy must be a mapping"),
        ("budget: {ratio: [\n", "p.yaml:2: invalid YAML"),
        ("team: a\nhistory\n  keep_recent: 3\n", "p.yaml:2: invalid YAML"),  # the key, no colon
        ("headings: {Notes: nowhere}\n", "p.yaml:1: unknown section 'nowhere' for a heading"),
    ],
)
def test_problems_name_file_and_line(text: str, expected: str) -> None:
    problems = problems_of(text)
    assert any(p.startswith(expected) for p in problems), problems


def test_raw_key_is_never_echoed() -> None:
    problems = problems_of("keys: [sk-live-123456]\n")
    assert all("sk-live-123456" not in p for p in problems)


def test_every_problem_is_reported_in_line_order() -> None:
    problems = problems_of("budget: {ratio: 2}\nhistory: {keep_recent: x}\nwat: 1\n")
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3"]


def test_folder(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text("budget: {ratio: 0.5}\n")
    (tmp_path / "research.yaml").write_text(f'keys: ["{hash_key("k1")}"]\n')
    (tmp_path / "notes.txt").write_text("ignored")
    policies = load_policy_dir(tmp_path)
    assert policies.default.budget.ratio == 0.5
    assert policies.for_key("k1") is not None and policies.for_key("k1").team == "research"  # type: ignore[union-attr]
    assert policies.for_key("k2") is None
    assert not policies.open_mode


def test_missing_folder_gives_built_in_default(tmp_path: Path) -> None:
    policies = load_policy_dir(tmp_path / "absent")
    assert policies.open_mode
    assert policies.default.team == "default"


def test_duplicate_team_and_key_across_files(tmp_path: Path) -> None:
    key = hash_key("k")
    (tmp_path / "a.yaml").write_text(f'team: x\nkeys: ["{key}"]\n')
    (tmp_path / "b.yaml").write_text(f'team: x\nkeys: ["{key}"]\n')
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    text = "\n".join(caught.value.problems)
    assert "team 'x' is also defined" in text and "a key is also listed" in text


def test_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "default.yaml").write_text("")
    assert main(["check", "--policies", str(tmp_path)]) == 0
    assert "ok: 1 policy" in capsys.readouterr().out
    (tmp_path / "bad.yaml").write_text("team: bad\nbudget:\n  ratio: 7\n")
    assert main(["check", "--policies", str(tmp_path)]) == 1
    assert f"{tmp_path / 'bad.yaml'}:3: budget.ratio" in capsys.readouterr().out


def test_shipped_policies_are_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    assert main(["check", "--policies", str(root / "policies")]) == 0


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        *[("off", "off"), ("OFF", "off"), ("no", "off"), ("false", "off"), ('"off"', "off")],
        *[("on", "bm25"), ("yes", "bm25"), ("true", "bm25"), ("bm25", "bm25")],
    ],
)
def test_yaml_booleans_in_relevance(written: str, expected: str) -> None:
    # YAML 1.1 reads a bare `off` as false; the README's `relevance: off` must still load.
    policy = load_policy_text(f"history: {{relevance: {written}}}\n", "p.yaml", "p")
    assert policy.history.relevance == expected


def test_shipped_relevance_comment_works_as_written() -> None:
    text = "history:\n  keep_recent: 6\n  relevance: off\n"
    assert load_policy_text(text, "p.yaml", "p").history.relevance == "off"


def test_yaml_booleans_elsewhere() -> None:
    # A string field takes a bare word as written (the team "no", not false).
    assert load_policy_text("team: no\n", "p.yaml", "p").team == "no"
    assert (
        load_policy_text("upstream: {api_key_env: on}\n", "p.yaml", "p").upstream.api_key_env
        == "on"
    )
    # An enum with no boolean meaning says why the value was refused.
    (problem,) = problems_of("sections:\n  memory: {overflow: off}\n")
    assert problem.startswith("p.yaml:2: sections.memory.overflow") and "boolean" in problem
    (problem,) = problems_of("budget: {on_required_overflow: yes}\n")
    assert "boolean" in problem
    # Switches stay booleans.
    assert load_policy_text("summaries: {enabled: on}\n", "p.yaml", "p").summaries.enabled


@pytest.mark.parametrize(
    "text",
    [
        "team: !!int abc\n",
        "history: {relevance: !!bool x}\n",
        "budget: {ratio: !!float x}\n",
        "team: !!python/name:os.system x\n",
        "keys: [!!binary x]\n",
    ],
)
def test_explicit_tags_that_cannot_be_built_are_problems_not_crashes(text: str) -> None:
    # Before: ValueError/KeyError/ConstructorError escaped `check` as a traceback, and on a
    # reload killed the file watcher.
    (problem,) = problems_of(text)
    assert problem.startswith("p.yaml:1: ") and "tagged" in problem


def test_a_typo_in_a_key_gets_did_you_mean_and_no_second_wrong_problem() -> None:
    """`warn:` for `warning:` used to add "warning must not exceed critical" (the default
    0.80 against the 0.6 given) and name no fix."""
    assert problems_of("thresholds: {warn: 0.5, critical: 0.6}\n") == [
        "p.yaml:1: unknown key thresholds.'warn': did you mean 'warning'?"
    ]
    assert problems_of("histroy: {keep_recent: 3}\n") == [
        "p.yaml:1: unknown key 'histroy': did you mean 'history'?"
    ]


def test_a_model_no_window_is_known_for_is_named_with_the_nearest_known_name(
    tmp_path: Path,
) -> None:
    from proxy.cli.serve_report import model_warnings
    from proxy.policy import load_policy_dir
    from proxy.tokens import ContextWindows

    (tmp_path / "default.yaml").write_text(
        "models:\n  gpt-4o-mni: {tokenizer: null}\n  my-model: {context_window: 8000}\n"
    )
    warnings = model_warnings(load_policy_dir(tmp_path), ContextWindows())
    assert len(warnings) == 1 and "'gpt-4o-mni' (did you mean 'gpt-4o-mini'?)" in warnings[0]
    assert warnings[0].startswith(f"{tmp_path / 'default.yaml'}:1: warning:")
