"""Terminal rendering of a trained head: the metrics table and the layer weights as bars."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

#: Metrics shown in the table, in this order, when a task reports them.
SHOWN = ("accuracy", "macro_f1", "mcc", "span_f1", "span_precision", "span_recall", "pearson", "spearman", "mse")


def render_metrics(metrics_by_split: dict[str, dict[str, dict]], console: Console, title: str = "",
                   primary: dict[str, str] | None = None) -> None:
    """One row per (split, task): the task's primary metric, then its other scalar metrics."""
    table = Table("split", "task", "metric", "value", "also", title=title or None)
    for split, tasks in metrics_by_split.items():
        for task, values in tasks.items():
            shown = [m for m in SHOWN if isinstance(values.get(m), float)]
            first = (primary or {}).get(task) or (shown[0] if shown else "")
            rest = ", ".join(f"{m} {values[m]:.3f}" for m in shown if m != first)
            value = f"{values[first]:.4f}" if first in values else ""
            table.add_row(split, task, first, value, f"{rest}, n {values.get('n', '')}".lstrip(", "))
    console.print(table)


def render_layer_weights(weights: dict, console: Console, width: int = 40) -> None:
    """Each mixer's weight per state as a horizontal bar, plus act depth / gumbel usage."""
    names = weights["layer_names"]
    for key, values in weights["mixers"].items():
        label = "layer weights" if key == "shared" else f"layer weights ({key})"
        if values is None:
            console.print(f"{label}: not available (no evaluation pass yet)")
            continue
        table = Table("state", "weight", "", title=label, title_justify="left", box=None)
        top = max(values) or 1.0
        for name, value in zip(names, values):
            table.add_row(name, f"{value:.3f}", "█" * max(0, round(width * value / top)))
        console.print(table)
    for key, usage in (weights.get("usage") or {}).items():
        parts = []
        if "mean_depth" in usage:
            parts.append(f"mean depth N+R per token {usage['mean_depth']:.2f}")
        if "mean_states_used" in usage:
            parts.append(f"states used per example {usage['mean_states_used']:.2f}")
        if parts:
            console.print(f"{key}: " + ", ".join(parts))
