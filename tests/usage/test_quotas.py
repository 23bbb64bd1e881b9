"""Quotas per team per UTC day and month, rebuilt from the usage log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.policy.model import QuotaPolicy, ThresholdPolicy
from proxy.types import Level
from proxy.usage.ledger import UsageLog, UsageRecord
from proxy.usage.quotas import QuotaBook, _first_offset_at_or_after, utc_day

T = ThresholdPolicy()
NOV1 = datetime(2026, 11, 1, tzinfo=UTC)


def iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_day_and_month_boundaries_are_utc() -> None:
    book = QuotaBook()
    book.add("a", 100, datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC))
    book.add("a", 10, datetime(2026, 11, 1, 0, 0, 0, tzinfo=UTC))
    # 01:00 at +02:00 is 23:00 UTC the day before: it belongs to October.
    book.add("a", 1000, datetime(2026, 11, 1, 1, 0, tzinfo=timezone(timedelta(hours=2))))
    assert book.used("a", datetime(2026, 11, 1, 12, tzinfo=UTC)) == (10, 10)
    assert book.used("a", datetime(2026, 11, 2, tzinfo=UTC)) == (0, 10)
    assert book.used("a", datetime(2026, 12, 1, tzinfo=UTC)) == (0, 0)
    assert book.used("nobody", NOV1) == (0, 0)


def test_a_late_record_of_yesterday_counts_for_the_month_only() -> None:
    book = QuotaBook()
    book.add("a", 5, datetime(2026, 11, 2, 0, 0, 1, tzinfo=UTC))
    book.add("a", 7, datetime(2026, 11, 1, 23, 59, 59, tzinfo=UTC))  # a long stream, logged late
    assert book.used("a", datetime(2026, 11, 2, 1, tzinfo=UTC)) == (5, 12)


def test_status_takes_the_tighter_quota() -> None:
    book = QuotaBook()
    book.add("a", 500, datetime(2026, 11, 3, tzinfo=UTC))
    book.add("a", 1400, datetime(2026, 11, 2, tzinfo=UTC))
    now = datetime(2026, 11, 3, 12, tzinfo=UTC)
    s = book.status("a", QuotaPolicy(daily_tokens=1000, monthly_tokens=2000), T, now)
    assert (s.used, s.limit, s.period, s.level, s.exceeded) == (
        1900,
        2000,
        "month",
        Level.CRITICAL,
        False,
    )
    s = book.status("a", QuotaPolicy(daily_tokens=600, monthly_tokens=20000), T, now)
    assert (s.used, s.limit, s.period, s.level) == (500, 600, "day", Level.WARNING)
    s = book.status("a", QuotaPolicy(daily_tokens=500), T, now)
    assert s.exceeded and s.level is Level.CRITICAL
    s = book.status("a", QuotaPolicy(daily_tokens=10_000), T, now)
    assert not s.exceeded and s.level is Level.NORMAL


def test_status_without_limits_and_with_a_zero_limit() -> None:
    book = QuotaBook()
    book.add("a", 5, NOV1)
    s = book.status("a", QuotaPolicy(), T, NOV1)
    assert (s.used, s.limit, s.level, s.exceeded, s.period) == (5, None, Level.NORMAL, False, None)
    s = book.status("b", QuotaPolicy(daily_tokens=0), T, NOV1)
    assert s.exceeded and s.level is Level.CRITICAL


def test_memory_stays_one_entry_per_team() -> None:
    book = QuotaBook()
    for d in range(400):
        book.add("a", 1, NOV1 + timedelta(days=d))
    assert len(book._teams) == 1
    assert book.used("a", NOV1 + timedelta(days=399)) == (1, (NOV1 + timedelta(days=399)).day)


def test_utc_day_parses_other_offsets() -> None:
    assert utc_day("2026-11-01T00:30:00+01:00") == "2026-10-31"
    assert utc_day("2026-11-01T00:30:00Z") == "2026-11-01"
    assert utc_day("2026-11-01T00:30:00") == "2026-11-01"
    assert utc_day("yesterday") is None


def test_rebuild_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    book = QuotaBook()
    book.add("a", 5, NOV1)
    assert book.rebuild(str(tmp_path / "none.jsonl"), NOV1) == 0
    assert book.used("a", NOV1) == (0, 0)


rows = st.lists(
    st.tuples(
        st.integers(0, 120 * 24 * 60),  # minutes after 2026-09-01, up to the end of December
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 10_000),
        st.sampled_from(["chat", "summary"]),
    ),
    max_size=300,
)


def write_log(
    path: Path, entries: list[tuple[int, str, int, str]]
) -> list[tuple[datetime, str, int]]:
    start = datetime(2026, 9, 1, tzinfo=UTC)
    out = []
    with path.open("wb") as f:
        for n, (minutes, team, tokens, kind) in enumerate(sorted(entries)):
            when = start + timedelta(minutes=minutes)
            rec = UsageRecord(
                ts=iso(when), request_id=str(n), team=team, total_tokens=tokens, kind=kind
            )
            f.write(rec.to_json_line())
            if n % 17 == 0:
                f.write(b"garbage\n{}\n")  # readers skip what they cannot use
            out.append((when, team, tokens))
    return out


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows, st.integers(0, 120 * 24 * 60), st.booleans())
def test_rebuild_equals_sums_over_the_log(
    tmp_path: Path, entries: list[tuple[int, str, int, str]], now_minutes: int, seek: bool
) -> None:
    """The restart case: a log of the past, rebuilt `now`, counts this UTC day and month."""
    entries = [e for e in entries if e[0] <= now_minutes]
    path = tmp_path / "u.jsonl"
    written = write_log(path, entries)
    now = datetime(2026, 9, 1, tzinfo=UTC) + timedelta(minutes=now_minutes, seconds=30)
    book = QuotaBook()
    # min_seek_bytes=0 forces the binary search into the current month on every log.
    book.rebuild(str(path), now, min_seek_bytes=0 if seek else 1 << 40)
    for team in "abc":
        day = sum(n for w, t, n in written if t == team and w.date() == now.date())
        month = sum(
            n for w, t, n in written if t == team and (w.year, w.month) == (now.year, now.month)
        )
        assert book.used(team, now) == (day, month)


def test_binary_search_lands_just_before_the_cutoff(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with path.open("wb") as f:
        for i in range(20_000):  # about 17 minutes apart: January to mid-July
            when = start + timedelta(minutes=17 * i)
            f.write(UsageRecord(ts=iso(when), team="a", total_tokens=1).to_json_line())
    data = path.read_bytes()
    for cutoff in ("2025-12-01", "2026-01-01", "2026-03-15", "2026-06-30", "2026-07-14", "2027"):
        with path.open("rb") as f:
            offset = _first_offset_at_or_after(f, cutoff)
        first = next(
            (i for i, line in enumerate(data.splitlines(True)) if utc_day(_ts(line)) >= cutoff),
            None,
        )
        starts = [0]
        for line in data.splitlines(True):
            starts.append(starts[-1] + len(line))
        target = len(data) if first is None else starts[first]
        assert offset == 0 or data[offset - 1 : offset] == b"\n"  # a line start
        assert offset <= target  # nothing at or after the cutoff is skipped
        assert target - offset < 8192  # and little before it is read
    now = start + timedelta(minutes=17 * 20_000)
    book, full = QuotaBook(), QuotaBook()
    book.rebuild(str(path), now, min_seek_bytes=0)
    full.rebuild(str(path), now, min_seek_bytes=1 << 40)
    assert book.used("a", now) == full.used("a", now) != (0, 0)


def _ts(line: bytes) -> str:
    ts = orjson.loads(line)["ts"]
    assert isinstance(ts, str)
    return ts


async def test_restart_remembers_what_was_spent(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    log = UsageLog(str(path))
    await log.start()
    book = QuotaBook()
    for i in range(10):
        rec = UsageRecord(team="a", total_tokens=100 + i, kind="summary" if i == 3 else "chat")
        log.write(rec)
        book.add(rec.team, rec.total_tokens)
    await log.aclose()
    with path.open("ab") as f:
        f.write(b'{"ts": "2026-')  # a torn line from a crash
    again = QuotaBook()
    assert again.rebuild(str(path)) == 10
    assert again.used("a") == book.used("a") == (1045, 1045)
    policy = QuotaPolicy(daily_tokens=1000, hard_limit=True)
    assert again.status("a", policy, T).exceeded


def test_rows_with_wrong_types_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    good = {"ts": iso(NOV1), "team": "a", "total_tokens": 3}
    bad = [
        {**good, "total_tokens": "3"},
        {**good, "team": None},
        {**good, "ts": 5},
        {**good, "ts": "x"},
    ]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [good, *bad, good]))
    book = QuotaBook()
    assert book.rebuild(str(path), NOV1) == 2
    assert book.used("a", NOV1) == (6, 6)
