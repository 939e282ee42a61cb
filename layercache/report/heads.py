"""Terminal rendering of a trained head: the metrics table and the layer weights as bars.

Values may be NaN (a Pearson correlation of constant predictions, weights read back from a damaged
run) or missing (``null`` in JSON); they print as ``nan`` / nothing, never crash the report.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the type only: rendering a run's files needs no torch
    from ..heads.run_folders.run_files import LayerWeights

#: Metrics shown in the table, in this order, when a task reports them.
SHOWN = ("accuracy", "macro_f1", "mcc", "span_f1", "span_precision", "span_recall", "pearson", "spearman", "r2",
         "mse")


def _number(value) -> float | None:
    """``value`` as a float when it is a real number (bool excluded), else None."""
    return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None


def _fmt(value, digits: int) -> str:
    """A number with ``digits`` decimals; ``nan`` / ``inf`` as such; anything else as text."""
    number = _number(value)
    if number is None:
        return "" if value is None else str(value)
    return f"{number:.{digits}f}" if math.isfinite(number) else str(number)


def render_metrics(metrics_by_split: dict[str, dict[str, dict]], console: Console, title: str = "",
                   primary: dict[str, str] | None = None) -> None:
    """One row per (split, task): the task's primary metric, then its other scalar metrics."""
    table = Table("split", "task", "metric", "value", "also", title=title or None)
    for split, tasks in metrics_by_split.items():
        for task, values in tasks.items():
            shown = [m for m in SHOWN if _number(values.get(m)) is not None]
            first = (primary or {}).get(task) or (shown[0] if shown else "")
            rest = ", ".join(f"{m} {_fmt(values[m], 3)}" for m in shown if m != first)
            value = _fmt(values.get(first), 4)
            table.add_row(split, task, first, value, f"{rest}, n {values.get('n', '')}".lstrip(", "))
    console.print(table)


def render_layer_weights(weights: LayerWeights, console: Console, width: int = 40) -> None:
    """Each mixer's weight per state as a horizontal bar, plus its usage summaries (act depth, gumbel usage)."""
    names = weights.layer_names or []
    for key, values in (weights.mixer_weights or {}).items():
        label = "layer weights" if key == "shared" else f"layer weights ({key})"
        if values is None:
            console.print(f"{label}: not available (no evaluation pass yet)")
            continue
        table = Table("state", "weight", "", title=label, title_justify="left", box=None)
        numbers = [_number(v) for v in values]
        finite = [v for v in numbers if v is not None and math.isfinite(v)]
        top = max(finite, default=0.0) or 1.0
        for name, value, number in zip(names, values, numbers):
            bar = "█" * max(0, round(width * number / top)) if number is not None and math.isfinite(number) else ""
            table.add_row(name, _fmt(value, 3), bar)
        console.print(table)
    usage_by_mixer = {k: u for k, u in (weights.usage or {}).items() if isinstance(u, dict) and u}
    if not usage_by_mixer:
        return
    from ..heads.mixers import usage_labels  # loads torch: only when there is usage to print

    labels = usage_labels()
    for key, usage in usage_by_mixer.items():
        parts = [f"{labels[name]} {_fmt(value, 2)}" for name, value in usage.items() if name in labels]
        if parts:
            console.print(f"{key}: " + ", ".join(parts))
