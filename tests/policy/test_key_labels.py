"""Key labels: one line of printable text when a key is made, one escaped cell when listed."""

from __future__ import annotations

import pytest

from proxy.policy.key_edit import KeyEntry, entries, entry_text
from proxy.policy.key_labels import MAX_LABEL, LabelError, checked_label, shown
from proxy.policy.load import load_policy_text

HASH = "sha256:" + "ab" * 32

HOSTILE = [
    "laptop\nresearch  sha256:0000000000000000  forged",  # a second row
    "ci\r runner",  # carriage return: the row's start written over
    "a\x1b[2Jb",  # an escape sequence clears the screen
    "tab\there",
    "pay\u202eroll",  # right-to-left override: the row shown backwards
    "ad\u2066min\u2069",  # bidi isolates
    "zero\u200bwidth",
    "line\u2028sep",
    "nel\x85here",
    "bom\ufeff",
    "lone \ud83d half",  # no terminal encoding can print it
    "x" * (MAX_LABEL + 1),
]


@pytest.mark.parametrize("label", HOSTILE)
def test_hostile_labels_are_refused_when_a_key_is_made(label: str) -> None:
    with pytest.raises(LabelError):
        checked_label(label)


@pytest.mark.parametrize("label", ["ci runner", "a😀b", "équipe données", "研究チーム", "❤️ ops"])
def test_printable_labels_are_taken_and_read_back_as_written(label: str) -> None:
    assert checked_label(label) == label
    text = f"team: research\nkeys:\n  - {entry_text(KeyEntry(HASH, label, '2026-01-02'))}\n"
    assert label in text  # written as it is, not as escapes
    assert entries(text) == [KeyEntry(HASH, label, "2026-01-02")]
    assert load_policy_text(text, "research.yaml", "research").keys == (HASH,)


@pytest.mark.parametrize("label", HOSTILE)
def test_any_label_a_file_holds_is_shown_as_one_printable_cell(label: str) -> None:
    cell = shown(label, 24)
    assert cell.isprintable() and len(cell) <= 4 * MAX_LABEL + 1
    cell.encode("utf-8")  # a lone surrogate would fail here, and with it the whole list


def test_cells_are_padded_by_columns_and_cut_at_the_limit() -> None:
    assert shown("ab", 5) == "ab   "
    assert shown("研究", 6) == "研究  "  # each takes two columns
    assert shown("e\u0301", 3) == "e\u0301  "  # a combining accent takes none
    assert shown("x\ny", 0) == "x\\x0ay"
    assert shown("a" * 300) == "a" * MAX_LABEL + "…"


def test_an_emoji_written_as_json_escapes_reads_back_whole() -> None:
    """What earlier `keys new` wrote: two UTF-16 halves, which YAML reads as lone surrogates."""
    text = f'keys:\n  - {{hash: "{HASH}", label: "a\\ud83d\\ude00b"}}\n'
    assert shown(entries(text)[0].label) == "a😀b"
