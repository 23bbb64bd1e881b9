"""Policy reloads never fail open: a file caught mid-save is refused, the last good set stays."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from proxy.policy.model import hash_key
from proxy.policy.store import PolicyStore

TEAM = f'team: research\nkeys: ["{hash_key("k1")}"]\nbudget: {{ratio: 0.5}}\n'


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[Path, PolicyStore]:
    (tmp_path / "default.yaml").write_text("")  # empty from the start: a valid policy
    (tmp_path / "research.yaml").write_text(TEAM)
    store = PolicyStore.load(str(tmp_path))
    store.quiet_s = 0.3  # the quiet window, shortened for the tests
    assert not store.current.open_mode
    return tmp_path / "research.yaml", store


def enforced(store: PolicyStore) -> bool:
    found = store.current.for_key("k1")
    return not store.current.open_mode and found is not None and found.team == "research"


@pytest.mark.parametrize(
    "half_written",
    [
        "",  # truncated to 0 bytes by a non-atomic save
        "  \n\n",
        "# research team\n",
        "~\n",
        "---\n",
        "team: research\n",  # cut before the keys line: valid YAML, but keyless
        'team: research\nkeys: ["sha256:9f8',  # cut inside the keys
    ],
)
def test_half_written_file_is_refused_then_the_full_file_is_picked_up(
    keyed: tuple[Path, PolicyStore], half_written: str, caplog: pytest.LogCaptureFixture
) -> None:
    path, store = keyed
    path.write_text(half_written)
    with caplog.at_level(logging.ERROR, logger="context_proxy.policy"):
        assert store.reload() is False
    assert enforced(store)
    assert "reload refused" in caplog.text
    assert "sha256:" not in caplog.text  # refusals name the file, never its keys

    path.write_text(TEAM.replace("0.5", "0.6"))
    assert store.reload() is True
    assert enforced(store) and store.current.by_team("research").budget.ratio == 0.6


def test_keyless_file_emptied_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "default.yaml").write_text("budget: {ratio: 0.5}\n")
    store = PolicyStore.load(str(tmp_path))
    (tmp_path / "default.yaml").write_text("")
    assert store.reload() is False
    assert store.current.default.budget.ratio == 0.5


def test_deliberate_changes_still_reload(keyed: tuple[Path, PolicyStore]) -> None:
    path, store = keyed
    # An empty file that stays empty, and a new empty file, are still valid policies.
    (path.parent / "extra.yaml").write_text("")
    assert store.reload() is True and store.current.by_team("extra").team == "extra"
    # Deleting the keyed file is a deliberate switch to open mode.
    path.unlink()
    assert store.reload() is True and store.current.open_mode


def test_missing_folder_on_reload_keeps_the_set(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "research.yaml").write_text(TEAM)
    store = PolicyStore.load(str(folder))
    (folder / "research.yaml").unlink()
    folder.rmdir()
    assert store.reload() is False and enforced(store)
    # Started on the built-in default (no folder): a reload with still no folder is a no-op.
    assert PolicyStore.load(str(tmp_path / "absent")).reload() is True


def test_settled_waits_for_the_file_to_stop_changing(keyed: tuple[Path, PolicyStore]) -> None:
    path, store = keyed
    store.settle_s = 0.2

    async def save_slowly() -> None:
        path.write_text("")  # the editor truncated the file ...
        await asyncio.sleep(0.05)
        path.write_text(TEAM.replace("0.5", "0.7"))  # ... and writes it a moment later

    async def run() -> bool:
        writer = asyncio.ensure_future(save_slowly())
        await asyncio.sleep(0.01)
        snapshot = await store.settled()
        await writer
        return store.apply(snapshot)

    assert asyncio.run(run()) is True
    assert enforced(store) and store.current.by_team("research").budget.ratio == 0.7


def test_watch_never_opens_the_proxy_during_a_save(keyed: tuple[Path, PolicyStore]) -> None:
    path, store = keyed
    store.settle_s = 0.1
    seen_open: list[bool] = []

    async def run() -> None:
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(store.watch(stop))
        await asyncio.sleep(0.5)  # let the watcher start
        path.write_text("")
        for _ in range(20):
            seen_open.append(store.current.open_mode)
            await asyncio.sleep(0.05)
        path.write_text(TEAM.replace("0.5", "0.4"))
        for _ in range(100):
            if store.current.by_team("research").budget.ratio == 0.4:
                break
            seen_open.append(store.current.open_mode)
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(watcher, 5)

    asyncio.run(run())
    assert not any(seen_open)
    assert enforced(store) and store.current.by_team("research").budget.ratio == 0.4


QUOTA_TEAM = TEAM + "quotas: {daily_tokens: 1000, hard_limit: true}\n"


def test_a_save_that_pauses_mid_file_never_goes_live_as_its_prefix(
    keyed: tuple[Path, PolicyStore],
) -> None:
    """A save that stalls 0.4 s after writing the first half (the keys, not the quota):
    two reads 0.25 s apart agreed on the half, which went live (the spent team served
    again). The folder is read only once no file has changed for the quiet window."""
    path, store = keyed
    store.quiet_s, store.settle_s = 0.8, 0.1
    path.write_text(QUOTA_TEAM)
    assert store.reload()
    half = QUOTA_TEAM[: QUOTA_TEAM.index("quotas")]
    read: list[bool] = []

    async def save_with_a_stall() -> None:
        path.write_text(half)
        await asyncio.sleep(0.4)
        path.write_text(QUOTA_TEAM.replace("1000", "2000"))

    async def run() -> None:
        writer = asyncio.ensure_future(save_with_a_stall())
        await asyncio.sleep(0.05)
        snapshot = await store.settled()
        await writer
        assert snapshot is not None
        read.append(store.apply(snapshot))

    asyncio.run(run())
    assert read == [True]
    assert store.current.by_team("research").quotas.daily_tokens == 2000
