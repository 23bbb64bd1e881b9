"""Ids: the specific strings a text holds (a reservation, an order, a ticket, a version),
and figures: its ids and numbers.

A run of letters, digits and "_" that holds a digit and is not a number alone, MIN_ID
characters or more: "ZFA04Y", "HAT069", "mia_li_3668", "test_0042", "x86_64". Read in
linear time: the look-behind fails at once inside a run, the letters before its first
digit are taken possessively, and nothing is given back.
"""

from __future__ import annotations

import re

MIN_ID = 5  # shorter runs ("gpt4", "v2", "h1") are in everything
_ID = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_]*+\d[A-Za-z0-9_]*+")
# Figures: ids and numbers (a price, a count, "10.005") of MIN_FIGURE characters or more,
# read the same linear way.
MIN_FIGURE = 3
_FIGURE = re.compile(r"(?<![A-Za-z0-9_.])[A-Za-z_]*+\d[A-Za-z0-9_]*+(?:\.\d++)?")


def ids_in(text: str) -> frozenset[str]:
    """The ids `text` holds."""
    return frozenset(w for w in _ID.findall(text) if len(w) >= MIN_ID and not w.isdigit())


def figures_in(text: str) -> frozenset[str]:
    """The ids and numbers `text` holds."""
    return frozenset(f for f in _FIGURE.findall(text) if len(f) >= MIN_FIGURE)
