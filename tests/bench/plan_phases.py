"""Where a plan's time goes: the planner's main steps timed one call at a time.

Used by bench_trim.py (`--phases`): each named step below is wrapped, in every planner
module that imported it, by a timer that adds its wall time to a counter; nested steps
count in their own row and in the step that called them (make_choices holds order_older
and bind_turns). The wrappers cost about a microsecond per call: a dozen calls a plan.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import proxy.planner

# (module, function): the planner's steps, in the order a plan runs them.
STEPS = (
    ("proxy.planner.parts.sections", "build_layout"),
    ("proxy.planner.parts.costs", "untagged_counts"),
    ("proxy.planner.budget.pinned", "pin_turns"),
    ("proxy.planner.budget.choices", "make_choices"),
    ("proxy.planner.budget.turn_choices", "bind_turns"),
    ("proxy.planner.budget.older_order", "order_older"),
    ("proxy.planner.budget.clusters", "settle"),
    ("proxy.planner.budget.decide", "decide"),
    ("proxy.planner.budget.turn_recall", "turn_recall"),
    ("proxy.planner.budget.trim", "omitted"),
    ("proxy.planner.budget.trim", "apply"),
    ("proxy.planner.budget.fit", "count_forwarded"),
)


@contextmanager
def timed_steps() -> Iterator[Counter[str]]:
    """Within the block, every step's wall time summed into the counter yielded."""
    spent: Counter[str] = Counter()
    modules = [importlib.import_module("proxy.planner.request")]
    for found in pkgutil.walk_packages(proxy.planner.__path__, "proxy.planner."):
        modules.append(importlib.import_module(found.name))
    undo: list[tuple[Any, str, Callable[..., Any]]] = []
    for module_name, name in STEPS:
        step = getattr(importlib.import_module(module_name), name)
        timer = _timer(step, name, spent)
        for module in modules:
            if getattr(module, name, None) is step:
                undo.append((module, name, step))
                setattr(module, name, timer)
    try:
        yield spent
    finally:
        for module, name, step in undo:
            setattr(module, name, step)


def _timer(step: Callable[..., Any], name: str, spent: Counter[str]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return step(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start

    return timed
