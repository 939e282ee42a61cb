"""The comparison's figures, drawn with matplotlib from its JSON data alone.

- ``scores``: per task, the probe score of every model by relative depth (0 = embeddings, 1 = last layer), one
  colour per model; its control task dashed, its best layer a star, its expected layer E_Delta a triangle on the
  depth axis (hollow when the gains are within noise);
- ``selectivity``: per classification task, task score - control score by relative depth;
- ``cka-A-B``: per pair of models, the heatmap of linear CKA between every state of one and every state of the
  other, each row's most similar state framed.

:func:`comparison_figures` lists them in order, each with a title and a caption that says how to read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.plotting import pyplot
from ..figures import COLORS, render_png
from .model import Comparison
from .summary import cka_about, cka_name, short


@dataclass(frozen=True)
class ComparisonFigure:
    """One figure of the comparison: its id, heading, caption and drawing function (as the probe report's)."""

    key: str
    title: str
    caption: str
    draw: Callable[[Comparison], Any]


def _values(values: Any) -> np.ndarray:
    """A JSON list with ``null`` entries as a float array with NaN."""
    return np.asarray([np.nan if v is None else v for v in values], np.float64)


def _color(comparison: Comparison, label: str) -> str:
    return COLORS[comparison.labels.index(label) % len(COLORS)]


MARKERS = ("o", "s", "D", "v", "P", "X", "^", "*")


def _style(comparison: Comparison, label: str) -> dict[str, Any]:
    """A model's line: its colour, its own marker, and a width that narrows model by model, so that two models
    with the same scores (a cache and its int8 twin) both show, one line inside the other."""
    k = comparison.labels.index(label)
    return {"color": _color(comparison, label), "marker": MARKERS[k % len(MARKERS)],
            "lw": max(4.4 - 1.1 * k, 1.0), "markersize": max(7.0 - 1.0 * k, 3.0)}


PANELS_PER_ROW = 2
"""Task panels side by side: two, so that each stays readable in the page's width."""


def _task_axes(comparison: Comparison, tasks: list[str]) -> tuple[Any, list[Any]]:
    """A figure with a panel per task, :data:`PANELS_PER_ROW` to a row, each with the relative-depth axis."""
    plt = pyplot()
    cols = min(len(tasks), PANELS_PER_ROW)
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.4 * cols + 0.4, 3.5 * rows + 0.6), squeeze=False,
                             layout="constrained")
    flat = list(axes.ravel())
    for ax in flat[len(tasks):]:
        ax.set_visible(False)
    for ax in flat[:len(tasks)]:
        ax.set_xlim(-0.04, 1.04)
        ax.set_xlabel("relative depth (0 = embeddings, 1 = last layer)", fontsize=8)
        ax.grid(alpha=0.3)
    return fig, flat[:len(tasks)]


def _legend(fig: Any, comparison: Comparison, extra: list[tuple[Any, str]]) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **_style(comparison, label)) for label in comparison.labels]
    labels = list(comparison.labels)
    for handle, text in extra:
        handles.append(handle)
        labels.append(text)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)


def figure_scores(comparison: Comparison) -> Any:
    """Probe score by relative depth, a panel per task and a line per model (see the module docstring)."""
    if not comparison.tasks:
        return None
    from matplotlib.lines import Line2D

    tasks = list(comparison.tasks)
    fig, axes = _task_axes(comparison, tasks)
    has_control = False
    for ax, task in zip(axes, tasks):
        entry = comparison.tasks[task]
        for label, model in entry["models"].items():
            depth, color = _values(comparison.model(label)["relative_depth"]), _color(comparison, label)
            style = _style(comparison, label)
            probe, summary = model["probe"], model["summary"]
            scores = _values(probe["eval"] if probe.get("eval") is not None else probe["validation"])
            ax.plot(depth, scores, **style)
            ax.plot([summary["best_depth"]], [scores[summary["best_index"]]], "*", color=color, markersize=13,
                    markeredgecolor="black", markeredgewidth=0.5)
            control = model.get("control")
            if control is not None:
                has_control = True
                ctrl = _values(control["eval"] if control.get("eval") is not None else control["validation"])
                ax.plot(depth, ctrl, "--", color=color, lw=1, alpha=0.8)
        for label, model in entry["models"].items():  # the expected layers, on the depth axis itself
            summary = model["summary"]
            if summary.get("expected_depth") is not None:
                noise = bool(summary.get("expected_layer_is_noise"))
                ax.plot([summary["expected_depth"]], [0.0], "^", markersize=9, color=_color(comparison, label),
                        markerfacecolor="none" if noise else _color(comparison, label), clip_on=False,
                        transform=ax.get_xaxis_transform())
        ax.set_title(f"{task} ({entry['metric']})", fontsize=9)
        ax.set_ylabel(f"probe score ({comparison.meta['eval_split'] or 'validation'})", fontsize=8)
    extra = [(Line2D([], [], ls="", marker="*", markersize=10, color="grey"), "best layer (on validation)"),
             (Line2D([], [], ls="", marker="^", markersize=8, color="grey"), "expected layer E_Δ (hollow: noise)")]
    if has_control:
        extra.insert(0, (Line2D([], [], ls="--", color="grey"), "control task (dashed)"))
    _legend(fig, comparison, extra)
    return fig


def figure_selectivity(comparison: Comparison) -> Any:
    """Selectivity (task - control) by relative depth, a panel per classification task and a line per model."""
    tasks = [t for t, e in comparison.tasks.items() if any("control" in m for m in e["models"].values())]
    if not tasks:
        return None
    fig, axes = _task_axes(comparison, tasks)
    for ax, task in zip(axes, tasks):
        for label, model in comparison.tasks[task]["models"].items():
            if "control" in model:
                ax.plot(_values(comparison.model(label)["relative_depth"]), _values(model["control"]["selectivity"]),
                        **_style(comparison, label))
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(task, fontsize=9)
        ax.set_ylabel("selectivity (task - control)", fontsize=8)
    _legend(fig, comparison, [])
    return fig


def figure_cka(comparison: Comparison, index: int) -> Any:
    """The CKA heatmap of pair ``index``: rows the first model's states, columns the second's."""
    pair = comparison.similarity[index]
    matrix = _values([v for row in pair["cka"] for v in row]).reshape(len(pair["rows"]), len(pair["columns"]))
    rows, cols = matrix.shape
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(min(2.2 + 0.42 * cols, 12), min(1.8 + 0.36 * rows, 12)), layout="constrained")
    # One scale, 0 to 1, for every pair. A debiased value below 0 (states unrelated but for the estimate's noise)
    # gets its own grey, and the colour bar an arrow for it, so it is not read as a weak positive similarity.
    import matplotlib

    below = bool(np.nanmin(matrix, initial=np.inf) < 0)
    cmap = matplotlib.colormaps["viridis"].with_extremes(under="#bdbdbd")
    image = ax.imshow(matrix, vmin=0, vmax=1, cmap=cmap, aspect="auto", origin="lower")
    fig.colorbar(image, ax=ax, label=cka_name(comparison) + (" (grey: below 0)" if below else ""), shrink=0.9,
                 extend="min" if below else "neither")
    ax.set_xticks(range(cols), [short(n) for n in pair["columns"]], fontsize=7, rotation=90 if cols > 16 else 0)
    ax.set_yticks(range(rows), [short(n) for n in pair["rows"]], fontsize=7)
    ax.set_xlabel(f"{pair['b']} (state)")
    ax.set_ylabel(f"{pair['a']} (state)")
    from matplotlib.patches import Rectangle

    for r, c in enumerate(pair["best_match_of_rows"]):
        if c is not None:
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="white", lw=1.6))
    if rows * cols <= 200:
        for (r, c), value in np.ndenumerate(matrix):
            if np.isfinite(value):
                ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="black" if value > 0.6 else "white")
    ax.set_title(f"{pair['a']} × {pair['b']}: {pair['n']:,} {'words' if pair['states'] == 'words' else 'examples'}",
                 fontsize=9)
    return fig


def _cka_figure(index: int) -> Callable[[Comparison], Any]:
    return lambda comparison: figure_cka(comparison, index)


def comparison_figures(comparison: Comparison) -> list[tuple[ComparisonFigure, bytes]]:
    """Every figure the comparison has data for, as (figure, PNG bytes), in the order the page shows them."""
    split = comparison.meta["eval_split"] or "validation"
    specs = [
        ComparisonFigure("scores", "Which depth knows what, model by model",
                     f"Probe score on {split} by relative depth (0 = embeddings, 1 = last layer), a colour per model; "
                     "dashed: the same probes on the control task; star: the best layer (chosen on validation); "
                     "triangle on the depth axis: the expected layer E_Δ of the cumulative gains (hollow "
                     "when no gain lies above zero beyond its bootstrap interval).", figure_scores),
        ComparisonFigure("selectivity", "Selectivity by depth",
                     "Task score minus control-task score (Hewitt & Liang) by relative depth: what the states, not "
                     "the probe's capacity to memorise word types, account for.", figure_selectivity),
    ]
    for index, pair in enumerate(comparison.similarity):
        specs.append(ComparisonFigure(
            f"cka-{index}", f"{pair['a']} × {pair['b']}",
            f"{cka_name(comparison, capital=True)} between every state of {pair['a']} (rows) and of {pair['b']} "
            "(columns), on the same "
            f"seeded {cka_about(comparison)}; a white frame marks each row's most similar column. 1: the same "
            "geometry up to a rotation and a scale.", _cka_figure(index)))
    out = []
    for spec in specs:
        fig = spec.draw(comparison)
        if fig is not None:
            out.append((spec, render_png(fig)))
    return out
