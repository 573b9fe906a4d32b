"""Charts of one ``bench.results`` run, drawn from its own numbers (matplotlib, SVG).

* ``scaling.svg`` — resume and write CPU against session length and against sessions per
  person: coach, openai-agents' ``SQLiteSession`` and raw ``sqlite3``, one line each.
* ``ratios.svg`` — every paired ratio of the run against its target: the bar is the
  median over rounds, the whisker its range, the dashed line the target.

``python -m bench.charts docs/bench/results.json`` draws them again from a run's numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .scaling import LABELS, Point, Scaling

COLOURS = {"coach": "#d62728", "agents SQLiteSession": "#1f77b4"}
"""coach red, the peer blue, raw grey (the default below)."""


@dataclass(frozen=True)
class Bar:
    """One paired ratio against its target."""

    label: str
    median: float
    low: float
    high: float
    target: float
    at_least: bool = False
    """The target is a floor (``≥``), not a ceiling."""

    @property
    def met(self) -> bool:
        """Whether the median is on the right side of the target."""
        return self.median >= self.target if self.at_least else self.median <= self.target


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "coach-bench", "svg.fonttype": "none", "font.size": 9})
    return plt


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})


def scaling_chart(scaling: Scaling, path: Path) -> None:
    """Four panels: (resume, write) × (session length, sessions per person)."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    axes_of: list[tuple[str, str, list[Point], str]] = [
        ("resume", "turns", scaling.by_length, "resume: CPU per read (ms)"),
        ("write", "turns", scaling.by_length, "a turn written: CPU (ms)"),
        ("resume", "sessions", scaling.by_sessions, "resume: CPU per read (ms)"),
        ("write", "sessions", scaling.by_sessions, "a turn written: CPU (ms)"),
    ]
    for ax, (kind, axis, points, ylabel) in zip(axes.flat, axes_of, strict=True):
        xs = [p.turns if axis == "turns" else p.sessions for p in points]
        for label in LABELS:
            ys = [p.median(kind, label) * 1e3 for p in points]
            lows = [min(p.runs(kind)[label]) * 1e3 for p in points]
            highs = [max(p.runs(kind)[label]) * 1e3 for p in points]
            colour = COLOURS.get(label, "#7f7f7f")
            name = {"coach": f"coach {'live resume' if kind == 'resume' else 'write_batch'}"}
            ax.plot(xs, ys, marker="o", color=colour, label=name.get(label, label))
            ax.fill_between(xs, lows, highs, color=colour, alpha=0.15, linewidth=0)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_xticks(xs, [f"{x:,}" for x in xs])
        ax.set_xlabel(
            "session length (turns)" if axis == "turns" else "sessions per person (the newest)"
        )
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Process CPU per op (all threads), median of paired rounds; band: range")
    _save(fig, path)
    plt.close(fig)


def ratios_chart(bars: Sequence[Bar], path: Path) -> None:
    """One row per target: the paired ratio's median and range, the target dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(bars) + 1.2), constrained_layout=True)
    ys = list(range(len(bars)))[::-1]
    for y, bar in zip(ys, bars, strict=True):
        colour = "#2ca02c" if bar.met else "#d62728"
        ax.barh(y, bar.median, left=0, color=colour, alpha=0.75, height=0.6)
        ax.errorbar(
            bar.median,
            y,
            xerr=[[bar.median - bar.low], [bar.high - bar.median]],
            color="black",
            capsize=3,
            linewidth=1,
        )
        ax.plot([bar.target, bar.target], [y - 0.4, y + 0.4], color="black", linestyle="--")
        sign = "≥" if bar.at_least else "≤"
        ax.annotate(
            f"{bar.median:.2f}× (target {sign} {bar.target:g}×)",
            (max(bar.high, bar.target), y),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(ys, [b.label for b in bars])
    ax.set_xlabel("coach / the other store (paired, median; whisker: range; log scale)")
    ax.set_xscale("log")
    low = min(min(b.low, b.target) for b in bars) / 1.5
    high = max(max(b.high, b.target) for b in bars) * 4
    ax.set_xlim(low, high)
    ticks = [t for t in (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100) if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    ax.minorticks_off()
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title("Issue 25's ratios: green met, red not met")
    _save(fig, path)
    plt.close(fig)


def from_json(path: Path) -> None:
    """Draw both charts again from a run's ``results.json`` (next to it)."""
    import json

    data = json.loads(path.read_text())
    points = {
        axis: [Point(**p) for p in data["scaling"][axis]] for axis in ("by_length", "by_sessions")
    }
    scaling_chart(Scaling(points["by_length"], points["by_sessions"]), path.parent / "scaling.svg")
    ratios_chart([Bar(**b) for b in data["ratios"]], path.parent / "ratios.svg")


if __name__ == "__main__":
    import sys

    from_json(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bench/results.json"))
