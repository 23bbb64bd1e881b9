"""The layout the code keeps: no import circles, small modules, the planner's rooms in order.

Read from the source (ast), so type-only imports count like any other: a module that
needs another's types depends on it just the same.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "proxy"
PLANNER = "proxy.planner"
# The planner's rooms, in the order imports point: each imports only rooms before it.
ROOMS = ("parts", "history", "budget", "report", "cache")
MAX_LINES = 300
MAX_PARAMETERS = 6  # in the planner: a run's state lives in its record, not in loose values


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SOURCES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str) -> Iterator[tuple[str, list[str]]]:
    """The project modules `name` imports, with the names it takes from each (a submodule
    named in `from package import submodule` is an import of that submodule)."""
    tree = ast.parse(SOURCES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SOURCES:
                    yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith("proxy"):
                continue
            names = [a.name for a in node.names]
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in SOURCES]
            yield from ((s, []) for s in subs)
            rest = [n for n in names if f"{node.module}.{n}" not in SOURCES]
            if rest or not subs:
                yield node.module, rest


GRAPH = {name: {target for target, _ in _imports(name)} - {name} for name in SOURCES}


def _cycle() -> list[str] | None:
    """One import circle, if there is any (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_circle_anywhere() -> None:
    assert _cycle() is None, " -> ".join(_cycle() or [])


def test_the_circle_finder_finds_one() -> None:
    saved = dict(GRAPH)
    try:
        GRAPH["proxy.types"] = GRAPH["proxy.types"] | {"proxy.errors"}
        GRAPH["proxy.errors"] = GRAPH["proxy.errors"] | {"proxy.types"}
        assert _cycle() is not None
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_modules_stay_small(name: str) -> None:
    lines = len(SOURCES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{SOURCES[name]}: {lines} lines"


def _room(name: str) -> str | None:
    """The planner room a module is in: "" for the planner's face and façade, None for a
    module outside the planner."""
    if name != PLANNER and not name.startswith(PLANNER + "."):
        return None
    part = name.split(".")[2] if name != PLANNER else ""
    return part if part in ROOMS else ""


def test_planner_rooms_import_one_way_through_faces() -> None:
    wrong = []
    for name in SOURCES:
        here = _room(name)
        for target in GRAPH[name]:
            there = _room(target)
            if there is None or here == there:
                continue
            if here is None:
                if target != PLANNER:
                    wrong.append(f"{name} reaches into the planner: {target}")
            elif there == "":
                wrong.append(f"{name} imports the planner's façade {target}")
            elif target != f"{PLANNER}.{there}":
                wrong.append(f"{name} imports {target}, not the room's face")
            elif here and ROOMS.index(there) >= ROOMS.index(here):
                wrong.append(f"{name} imports {target}: a room after its own")
    assert not wrong, "\n".join(sorted(wrong))


def test_faces_export_only_what_others_use() -> None:
    """Every name a room's face exports is imported from that face somewhere else: in
    another room, the façade, or the rest of the proxy."""
    used: dict[str, set[str]] = {room: set() for room in ROOMS}
    for name in SOURCES:
        for target, names in _imports(name):
            room = _room(target)
            if room and target == f"{PLANNER}.{room}" and _room(name) != room:
                used[room].update(names)
    idle = {}
    for room in ROOMS:
        face = ast.parse(SOURCES[f"{PLANNER}.{room}"].read_text())
        exported = next(
            {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
            for node in face.body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
        )
        if exported - used[room]:
            idle[room] = sorted(exported - used[room])
    assert not idle, f"exported and used by no other room: {idle}"


def test_planner_functions_take_few_parameters() -> None:
    long = []
    for name, path in SOURCES.items():
        if _room(name) is None and name != PLANNER:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            count = len(names) - (names[:1] in (["self"], ["cls"])) + bool(a.vararg) + bool(a.kwarg)
            if count > MAX_PARAMETERS:
                long.append(f"{name}.{node.name}: {count}")
    assert not long, long


SERVER = "proxy.server"
# The server's rooms, from the top: the app routes to the routes beside the pipeline and
# to the dialects, which the pipeline serves; all of them stand on the core. A room imports
# only rooms after it in this list.
SERVER_ROOMS = ("app", "routes", "dialects", "pipeline", "core")


def _server_room(name: str) -> str | None:
    if not name.startswith(SERVER + "."):
        return None
    return name.split(".")[2]


def test_the_server_is_in_rooms_whose_imports_point_down() -> None:
    """No module of server/ outside a room; the pipeline knows no dialect, the dialects no
    route, the core nothing above it; no dialect imports another."""
    loose = [n for n in SOURCES if _server_room(n) not in (None, *SERVER_ROOMS)]
    assert not loose, loose
    wrong = []
    for name in SOURCES:
        here = _server_room(name)
        if here is None:
            continue
        for target in GRAPH[name]:
            there = _server_room(target)
            if there is None or there == here:
                if here == there == "dialects" and target != name and target.count(".") > 2:
                    wrong.append(f"{name} imports another dialect: {target}")
                continue
            if SERVER_ROOMS.index(there) < SERVER_ROOMS.index(here):
                wrong.append(f"{name} imports {target}: a room above its own")
    assert not wrong, "\n".join(sorted(wrong))


def test_one_pipeline_serves_every_planned_api() -> None:
    """The three APIs are dialects: none calls upstream, plans or checks a quota itself;
    the pipeline does, once, for each."""
    for dialect in ("chat", "responses", "messages"):
        text = SOURCES[f"{SERVER}.dialects.{dialect}"].read_text()
        for step in ("upstream.send(", "check_quota(", "await plan(", "resolve_policy("):
            assert step not in text, (dialect, step)
    pipeline = SOURCES[f"{SERVER}.pipeline.pipeline"].read_text()
    for step in ("upstream.send(", "check_quota(services, ex, use)", "await plan(",
                 "resolve_policy(", "read_body("):  # fmt: skip
        assert pipeline.count(step) == 1, step
