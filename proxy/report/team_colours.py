"""One colour per team on every chart of the dashboard, and each team's own thresholds.

Teams are ranked once, by their tokens over the whole report: the first TOP_TEAMS keep a
colour of the palette on every chart (a legend that holds from chart to chart), the rest
are summed as "other", in grey, on every chart alike."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape

PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
)  # fmt: skip
TOP_TEAMS = len(PALETTE)  # coloured teams; the rest are "other"
OTHER, OTHER_COLOUR = "other", "#9d9d9d"
DEFAULT_THRESHOLDS = (0.80, 0.90)  # a team no policy read names: the defaults


@dataclass(frozen=True, slots=True)
class TeamColours:
    """Each team's name on the charts (itself or "other") and its colour."""

    shown: tuple[str, ...]  # the coloured teams, by rank
    summed: bool  # whether some team is summed as "other"
    colours: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def ranked(cls, totals: Mapping[str, float], teams: Iterable[str] = ()) -> TeamColours:
        """From each team's total (tokens); `teams` named nowhere in `totals` come last."""
        every = dict.fromkeys(sorted(totals, key=lambda t: (-totals[t], t)))
        every.update(dict.fromkeys(sorted(set(teams) - set(every))))
        shown = tuple(list(every)[:TOP_TEAMS])
        colours = {team: PALETTE[k] for k, team in enumerate(shown)}
        return cls(shown, len(every) > TOP_TEAMS, colours)

    def name(self, team: str) -> str:
        return team if team in self.colours else OTHER

    def colour(self, team: str) -> str:
        return self.colours.get(team, OTHER_COLOUR)

    def order(self, names: Iterable[str]) -> list[str]:
        """`names` (as `name` gives them) in the legend's order, "other" last."""
        present = set(names)
        return [t for t in (*self.shown, OTHER) if t in present]

    def legend(self, names: Iterable[str] | None = None) -> str:
        teams = (
            self.order(names)
            if names is not None
            else [*self.shown] + ([OTHER] if self.summed else [])
        )
        return '<div class="legend">' + "".join(
            f'<span><i style="background:{self.colour(t)}"></i>{escape(t)}</span>' for t in teams
        ) + "</div>"  # fmt: skip


def grouped(per_team: Mapping[str, float], colours: TeamColours) -> dict[str, float]:
    """`per_team` summed by chart name: the coloured teams, and "other"."""
    out: dict[str, float] = {}
    for team, n in per_team.items():
        name = colours.name(team)
        out[name] = out.get(name, 0) + n
    return out


def threshold_sets(
    thresholds: Mapping[str, tuple[float, float]], teams: Iterable[str]
) -> dict[tuple[float, float], list[str]]:
    """The distinct (warning, critical) pairs of `teams`, each with the teams that have it."""
    out: dict[tuple[float, float], list[str]] = {}
    for team in sorted(set(teams)):
        out.setdefault(thresholds.get(team, DEFAULT_THRESHOLDS), []).append(team)
    return out
