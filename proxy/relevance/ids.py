"""Ids: the specific strings a text holds (a reservation, an order, a ticket, a version).

A run of letters, digits and "_" that holds a digit and is not a number alone, MIN_ID
characters or more: "ZFA04Y", "HAT069", "mia_li_3668", "test_0042", "x86_64". Read in
linear time: the look-behind fails at once inside a run, the letters before its first
digit are taken possessively, and nothing is given back.
"""

from __future__ import annotations

import re

MIN_ID = 5  # shorter runs ("gpt4", "v2", "h1") are in everything
_ID = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_]*+\d[A-Za-z0-9_]*+")


def ids_in(text: str) -> frozenset[str]:
    """The ids `text` holds."""
    return frozenset(w for w in _ID.findall(text) if len(w) >= MIN_ID and not w.isdigit())
