"""The probing report's figures, drawn with matplotlib from the report's JSON data alone.

Each ``figure_*`` function takes a :class:`~.model.ProbeReport` and returns a matplotlib
figure, or ``None`` when the report lacks that part (a regression-only cache has no MDL, an
encoder no logit lens). :func:`report_figures` lists them in the order the report shows them,
with a title and a caption that says how to read each.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.plotting import pyplot
from .model import ProbeReport

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _plt():
    return pyplot()  # no display, and never a GUI window from a report


def _values(values) -> np.ndarray:
    """A JSON list with ``null`` entries as a float array with NaN."""
    return np.asarray([np.nan if v is None else v for v in values], np.float64)


def _layer_axis(ax, names: list[str]) -> None:
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([_short(n) for n in names], rotation=0)
    ax.set_xlabel("layer")
    ax.grid(alpha=0.3)


def _short(name: str) -> str:
    """``embeddings`` -> ``emb``, ``layer_3`` -> ``3``: tick labels that fit under a plot."""
    return "emb" if name == "embeddings" else name.removeprefix("layer_")


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _legend_below(fig, handles=None, labels=None, ncol: int | None = None) -> None:
    """One legend for the whole figure, below its panels, where it covers no data.

    The figure must use the constrained layout (``layout="constrained"``), which makes room for it.
    """
    if handles is None:
        handles, labels = [], []
        for ax in fig.axes:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                if label not in labels:
                    handles.append(handle)
                    labels.append(label)
    if not handles:
        return
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol or min(len(handles), 4), fontsize=8,
               frameon=False)


def _min_span(ax, low: float, high: float, span: float) -> None:
    """Y limits around ``low..high`` that are at least ``span`` wide, so that noise is not stretched to full height."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return
    if high - low < span:
        centre = (low + high) / 2
        low, high = centre - span / 2, centre + span / 2
    pad = 0.08 * (high - low)
    ax.set_ylim(low - pad, high + pad)


def _task_panels(report: ProbeReport, part: str):
    """A figure with one panel per task that has ``part``, and ``(axes, task, the part's data, colour)`` per
    panel; None when no task has it."""
    tasks = {k: t for k, t in report.tasks.items() if part in t}
    if not tasks:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks) + 1, 3.5), squeeze=False,
                             layout="constrained")
    order = list(report.tasks)
    return fig, [(axes[0, i], task, t[part], _color(order.index(task))) for i, (task, t) in enumerate(tasks.items())]


def figure_scores(report: ProbeReport):
    """Probe score and selectivity by layer, one line per task; one legend below the panels."""
    if not report.tasks:
        return None
    plt = _plt()
    from matplotlib.lines import Line2D

    names = report.layer_names
    has_control = any("control" in t for t in report.tasks.values())
    fig, axes = plt.subplots(1, 2 if has_control else 1, figsize=(11 if has_control else 6, 4.0), squeeze=False,
                             layout="constrained")
    ax = axes[0, 0]
    handles, labels = [], []
    for i, (task, t) in enumerate(report.tasks.items()):
        probe = t["probe"]
        scores = _values(probe["eval"] if probe.get("eval") is not None else probe["validation"])
        (line,) = ax.plot(range(len(names)), scores, "o-", color=_color(i))
        handles.append(line)
        labels.append(f"{task} ({t['metric']})")
        if "control" in t:
            control = t["control"]
            ctrl = _values(control["eval"] if control.get("eval") is not None else control["validation"])
            ax.plot(range(len(names)), ctrl, ":", color=_color(i), alpha=0.8)
        best = probe["best_index"]
        ax.plot([best], [scores[best]], "*", color=_color(i), markersize=14)
    if has_control:
        handles.append(Line2D([], [], ls=":", color="grey"))
        labels.append("control task (dotted)")
    handles.append(Line2D([], [], ls="", marker="*", markersize=10, color="grey"))
    labels.append("best on validation")
    ax.set_ylabel("probe score")
    ax.set_title("probe score by layer (dotted: control task; star: best on validation)", fontsize=9)
    _layer_axis(ax, names)
    if has_control:
        ax = axes[0, 1]
        for i, (_task, t) in enumerate(report.tasks.items()):
            if "control" in t:
                ax.plot(range(len(names)), _values(t["control"]["selectivity"]), "o-", color=_color(i))
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_ylabel("selectivity (task - control)")
        ax.set_title("selectivity by layer (same colours)", fontsize=9)
        _layer_axis(ax, names)
    _legend_below(fig, handles, labels, ncol=min(len(handles), 4))
    return fig


def figure_mdl(report: ProbeReport):
    """Online codelength (kbits) by layer, one panel per classification task."""
    panels = _task_panels(report, "mdl")
    if panels is None:
        return None
    fig, panels = panels
    names = report.layer_names
    for ax, task, mdl, color in panels:
        bits = _values(mdl["codelength_bits"]) / 1000
        ax.bar(range(len(names)), bits, color=color)
        ax.axhline(mdl["uniform_bits"] / 1000, color="grey", ls="--", lw=1, label="uniform code (dashed)")
        ax.set_ylim(0, max(np.nanmax(bits), mdl["uniform_bits"] / 1000) * 1.1)
        ax.set_title(f"{task}: best {mdl['best_layer']}, compression "
                     f"{np.nanmax(_values(mdl['compression'])):.2f}", fontsize=9)
        ax.set_ylabel("codelength (kbits)")
        _layer_axis(ax, names)
    _legend_below(fig)
    return fig


MIN_GAIN_RANGE = 0.02
"""The gains panel spans at least ±this (in the task's metric), so that ±0.004 of noise stays small."""
MIN_SCORE_SPAN = 0.05
"""The score panel spans at least this much of the metric."""


def _gain_errors(cum: dict, gains: np.ndarray) -> np.ndarray | None:
    """Error bars (2, layers) from ``gain_intervals`` (per prefix ``[lo, hi]`` or null); None when absent."""
    intervals = cum.get("gain_intervals")
    if not intervals or len(intervals) != len(gains):
        return None
    errors = np.zeros((2, len(gains)))
    for i, interval in enumerate(intervals):
        if interval is None or any(v is None for v in interval) or not np.isfinite(gains[i]):
            continue
        low, high = interval
        errors[0, i] = max(gains[i] - low, 0.0)
        errors[1, i] = max(high - gains[i], 0.0)
    return errors


def figure_cumulative(report: ProbeReport):
    """Cumulative scoring, one column per task: the score of the mix of layers 0..l (top) and the gain
    each layer adds, with its uncertainty when the report has it (bottom, on its own axis around zero)."""
    tasks = {k: t["cumulative"] for k, t in report.tasks.items() if "cumulative" in t}
    if not tasks:
        return None
    plt = _plt()
    names = report.layer_names
    order = list(report.tasks)
    fig, axes = plt.subplots(2, len(tasks), figsize=(3.6 * len(tasks) + 1, 5.2), squeeze=False, sharex="col",
                             layout="constrained", gridspec_kw={"height_ratios": [1, 1.15]})
    x = np.arange(len(names))
    for col, (task, cum) in enumerate(tasks.items()):
        color = _color(order.index(task))
        top, bottom = axes[0, col], axes[1, col]
        scores = _values(cum["scores"])
        top.plot(x, scores, "o-", color=color)
        if np.isfinite(scores).any():
            _min_span(top, np.nanmin(scores), np.nanmax(scores), MIN_SCORE_SPAN)
        top.set_ylabel("score of mix 0..l")
        top.grid(alpha=0.3)
        noise = bool(cum.get("expected_layer_is_noise"))
        centre = cum.get("expected_layer")
        if noise:
            heading = "E_Δ: gains within noise"
        elif centre is not None:
            heading = f"E_Δ = {centre:.2f}"
        else:
            heading = "E_Δ undefined"
        top.set_title(f"{task}: {heading}", fontsize=9)

        gains = _values(cum["gains"])
        errors = _gain_errors(cum, gains)
        bottom.bar(x, gains, color=color, alpha=0.6, yerr=errors, ecolor="black",
                   error_kw={"lw": 0.9, "capsize": 2.5})
        bottom.axhline(0, color="black", lw=0.8)
        lows = gains - (errors[0] if errors is not None else 0)
        highs = gains + (errors[1] if errors is not None else 0)
        low = min(float(np.min(lows[np.isfinite(lows)], initial=0.0)), -MIN_GAIN_RANGE)
        high = max(float(np.max(highs[np.isfinite(highs)], initial=0.0)), MIN_GAIN_RANGE)
        pad = 0.08 * (high - low)
        bottom.set_ylim(low - pad, high + pad)
        bottom.set_ylabel("gain Δ_l over 0..l-1")
        if noise and cum.get("noise_note"):
            bottom.set_title(textwrap.fill(str(cum["noise_note"]), 48), fontsize=7, color="#8a5a00")
        else:
            bottom.set_title("gain of each layer" + (" (bars: its interval)" if errors is not None else ""),
                             fontsize=8)
        if centre is not None and not noise:
            for ax in (top, bottom):
                ax.axvline(centre, color="black", ls=":", lw=1)
        top.tick_params(labelbottom=False)
        _layer_axis(bottom, names)
    return fig


def figure_layer_weights(report: ProbeReport):
    """Layer weights side by side: every trained run's mixers and every task's cumulative full mix."""
    series: list[tuple[str, np.ndarray]] = []
    for run in report.runs:
        for key, values in run["weights"].items():
            if run.get("layer_names") == report.layer_names:
                label = run["name"] if key == "shared" else f"{run['name']} ({key})"
                series.append((label, _values(values)))
    for task, t in report.tasks.items():
        if "cumulative" in t:
            mix = _values(t["cumulative"]["mix_weights"][-1])
            series.append((_mix_label(task, mix, report.layer_names), mix))
    if not series:
        return None
    plt = _plt()
    names = report.layer_names
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 3), 4.2), layout="constrained")
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        ax.bar(np.arange(len(names)) + i * width - 0.4 + width / 2, values, width=width, color=_color(i), label=label)
    ax.set_ylabel("weight")
    ax.set_title("layer weights (trained runs; each task's cumulative probe over all layers)", fontsize=9)
    _layer_axis(ax, names)
    _legend_below(fig, ncol=3)
    return fig


ONE_LAYER = 0.99
"""A probe mix with this share on one layer is labelled as that layer, not as a mix."""


def _mix_label(task: str, mix: np.ndarray, names: list[str]) -> str:
    """The legend entry of a task's cumulative probe over all layers: its fitted scalar mix, named for what it is.

    The fit starts from the best single layer (0.9 of the mix) and does not penalise the mix, so it
    often ends with all its weight on one layer; then the entry says so instead of calling it a mix.
    """
    top = int(np.nanargmax(mix)) if np.isfinite(mix).any() else None
    if top is not None and mix[top] >= ONE_LAYER:
        return f"probe on all layers: {task} (kept only {names[top]})"
    return f"probe mix of all layers: {task}"


def figure_similarity(report: ProbeReport):
    """Linear CKA between layers as a heatmap, values written in the cells."""
    if report.similarity is None:
        return None
    plt = _plt()
    names = report.similarity["layers"]
    cka = _values([v for row in report.similarity["cka"] for v in row]).reshape(len(names), len(names))
    fig, ax = plt.subplots(figsize=(0.55 * len(names) + 2.5, 0.55 * len(names) + 1.8))
    image = ax.imshow(cka, vmin=0, vmax=1, cmap="viridis")
    labels = [_short(n) for n in names]
    ax.set_xticks(range(len(names)), labels)
    ax.set_yticks(range(len(names)), labels)
    if len(names) <= 16:
        for i in range(len(names)):
            for j in range(len(names)):
                ax.text(j, i, f"{cka[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if cka[i, j] < 0.6 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046)
    ax.set_title(f"linear CKA ({report.similarity['source']}, {report.similarity['split']}, "
                 f"n={report.similarity['n']})", fontsize=9)
    fig.tight_layout()
    return fig


def figure_prediction_depth(report: ProbeReport):
    """Prediction depth: how many examples settle at each layer, and the accuracy by depth."""
    panels = _task_panels(report, "prediction_depth")
    if panels is None:
        return None
    fig, panels = panels
    names = report.layer_names
    for ax, task, depth, color in panels:
        counts = _values(depth["counts"])
        ax.bar(range(len(names)), counts / max(counts.sum(), 1), color=color)
        ax.set_ylabel("share of examples")
        twin = ax.twinx()
        twin.plot(range(len(names)), _values(depth["accuracy_by_depth"]), "k.-", label="accuracy at that depth")
        twin.set_ylim(0, 1.05)
        twin.set_ylabel("final-layer accuracy")
        ax.set_title(f"{task}: mean depth {depth['mean']:.2f}", fontsize=9)
        _layer_axis(ax, names)
    return fig


def _nonempty_families(token_depth: dict) -> list[tuple[str, list[dict]]]:
    """Each token family's categories that hold tokens (``punctuation (0)`` has no bar to show); a family with
    none is left out."""
    out = []
    for family, rows in token_depth["by_category"]["families"].items():
        rows = [r for r in rows if r.get("count")]
        if rows:
            out.append((family, rows))
    return out


def figure_token_depth(report: ProbeReport):
    """Per-token depth of a head whose mixer has one (``act``): its histogram, and its mean by token category
    (one panel per family).

    The panels wrap three to a row, each row as tall as its longest list of categories, so that a
    family with many categories (CoNLL-2003's 45 POS tags) keeps readable labels.
    """
    td = report.token_depth
    if td is None:
        return None
    plt = _plt()
    families = _nonempty_families(td)
    n_panels = 1 + len(families)
    n_cols = min(3, n_panels)
    n_rows = -(-n_panels // n_cols)
    sizes = [0] + [len(rows) for _, rows in families]  # categories per panel (the histogram: none)
    heights = [max(3.0, 0.5 + 0.22 * max(sizes[r * n_cols:(r + 1) * n_cols])) for r in range(n_rows)]
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.3 * n_cols + 0.5, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    panels = list(axes.flat)
    ax = panels[0]
    edges, counts = _values(td["histogram"]["edges"]), _values(td["histogram"]["counts"])
    ax.bar(edges[:-1], counts / max(counts.sum(), 1), width=np.diff(edges), align="edge", color=_color(0),
           edgecolor="white")
    ax.set_xlabel("depth N + R (layers)")
    ax.set_ylabel("share of tokens")
    ax.set_title(f"{td.get('mixer', 'act')} depth, mean {td['mean']:.2f}", fontsize=9)
    for i, (family, rows) in enumerate(families, start=1):
        ax = panels[i]
        labels = [r["category"] for r in rows]
        means = _values([r["mean"] for r in rows])
        ax.barh(range(len(rows)), means, xerr=_depth_spread(rows, means, edges), color=_color(i), alpha=0.8,
                error_kw={"lw": 0.8})
        ax.set_yticks(range(len(rows)), [f"{label} ({r['count']:,})" for label, r in zip(labels, rows)], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("mean depth (layers)")
        ax.set_title(family, fontsize=9)
    for ax in panels[n_panels:]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def _depth_spread(rows: list[dict], means: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(2, K) whiskers below and above each category's mean: to its 10th and 90th percentiles, which stay inside
    the depths tokens reached (mean ± sd ran past the deepest layer when depths bunch there). A report written
    before the percentiles were kept: ± sd, cut at the histogram's range of depths."""
    if all("p10" in r and "p90" in r for r in rows):
        low, high = _values([r["p10"] for r in rows]), _values([r["p90"] for r in rows])
    else:
        stds = _values([r["std"] for r in rows])
        low, high = np.maximum(means - stds, edges[0]), np.minimum(means + stds, edges[-1])
    return np.stack([np.clip(means - low, 0, None), np.clip(high - means, 0, None)])  # a mean beyond p90: no arm


def figure_logit_lens(report: ProbeReport):
    """Logit lens: next-token accuracy and KL to the final layer, by layer."""
    lens = report.logit_lens
    if lens is None:
        return None
    plt = _plt()
    names = lens["layer_names"]
    fig, ax = plt.subplots(figsize=(6.5, 3.6), layout="constrained")
    ax.plot(range(len(names)), _values(lens["accuracy"]), "o-", color=_color(0), label="next-token accuracy")
    ax.set_ylabel("next-token accuracy")
    twin = ax.twinx()
    twin.plot(range(len(names)), _values(lens["kl_to_final"]), "s--", color=_color(1), label="KL to final (nats)")
    twin.set_ylabel("KL(final || layer), nats")
    ax.set_title("logit lens: every layer through the final norm and unembedding", fontsize=9)
    _layer_axis(ax, names)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    _legend_below(fig, handles, [h.get_label() for h in handles], ncol=2)
    return fig


LENS_STYLES = {"logit": ("o-", 0), "tuned": ("s-", 1), "linear": ("^--", 2)}  # each lens's marker and colour


def figure_lenses(report: ProbeReport):
    """The logit lens, the tuned lens and the linear shortcut per layer: KL to the final layer, next-token bits."""
    if report.lenses is None:
        return None
    scores = report.lenses["scores"]
    names = next(iter(scores.values()))["layer_names"]
    fig, (kl_ax, bits_ax) = _plt().subplots(1, 2, figsize=(9.5, 3.6), layout="constrained")
    for name, s in scores.items():
        marker, color = LENS_STYLES.get(name, ("o-", 3))
        # the last layer's KL is 0 by definition: the log axis shows the others
        kl_ax.plot(range(len(names) - 1), _values(s["kl"])[:-1], marker, color=_color(color), label=f"{name} lens")
        bits_ax.plot(range(len(names)), _values(s["cross_entropy_bits"]), marker, color=_color(color))
    kl_ax.set(yscale="log", ylabel="KL(final || layer), nats")
    bits_ax.set(ylabel="next-token cross-entropy, bits")
    for ax, title, shown in ((kl_ax, "distance to the model's output", names[:-1]),
                             (bits_ax, "next-token prediction", names)):
        ax.set_title(title, fontsize=9)
        _layer_axis(ax, shown)
    handles, labels = kl_ax.get_legend_handles_labels()
    _legend_below(fig, handles, labels, ncol=len(scores))
    return fig


@dataclass(frozen=True)
class ReportFigure:
    """One figure of the report: its id (the image's file stem), heading, caption and drawing function."""

    key: str
    title: str
    caption: str
    draw: Callable[[ProbeReport], object]


FIGURES: tuple[ReportFigure, ...] = (
    ReportFigure("scores", "Which layer knows what",
                 "Linear probe score per layer on the evaluation split (dotted: the control task, whose labels "
                 "only memorisation can learn); right: selectivity = task - control. A property is in the states "
                 "where the score is high and the selectivity too.", figure_scores),
    ReportFigure("mdl", "Description length",
                 "Online codelength of the labels given each layer (Voita & Titov), against the uniform code: "
                 "lower means the labels are easier to extract, with the probe's effort counted.", figure_mdl),
    ReportFigure("cumulative", "Cumulative scoring",
                 "Top: score of a probe on the learned scalar mix of layers 0..l. Bottom, on its own axis around "
                 "zero: the gain each layer adds, with its uncertainty interval when the report has one. E_Δ is "
                 "the centre of gravity of the gains (Tenney et al.); the panel says when the gains are within "
                 "noise, where E_Δ means nothing.", figure_cumulative),
    ReportFigure("layer_weights", "Layer weights",
                 "Every trained run's mixer weights for this cache, beside the scalar mix each task's cumulative "
                 "probe over all layers ends its fit with. That fit starts at 0.9 on the best single layer and does "
                 "not penalise the mix, so it often keeps one layer; the legend then names that layer.",
                 figure_layer_weights),
    ReportFigure("similarity", "Layer similarity",
                 "Linear CKA between the layers' pooled vectors: blocks of similar layers, and where the "
                 "representation changes.", figure_similarity),
    ReportFigure("prediction_depth", "Prediction depth",
                 "The earliest layer from which every later layer's probe predicts what the last one does (bars), "
                 "and the last layer's accuracy on the examples of each depth (dots).", figure_prediction_depth),
    ReportFigure("token_depth", "How deep each token goes",
                 "Per-token depth N + R of an adaptive-computation-time head, its distribution and its mean "
                 "by token category (whiskers: its 10th to 90th percentile).", figure_token_depth),
    ReportFigure("logit_lens", "Logit lens",
                 "Each layer read through the model's final norm and unembedding: next-token accuracy and the KL "
                 "divergence from the final layer's distribution.", figure_logit_lens),
    ReportFigure("lenses", "Tuned lens",
                 "Each layer read three ways: as it is (logit lens), through an affine translator trained on the KL "
                 "to the final distribution (tuned lens, Belrose et al.), and through the least-squares map to the "
                 "last state (linear shortcut, Din et al.); both fitted on the train split, scored on the report's "
                 "split. Left: KL to the final layer's distribution (log scale); right: next-token cross-entropy.",
                 figure_lenses),
)
"""The report's figures, in the order it shows them."""


def render_png(fig, dpi: int = 110) -> bytes:
    """A figure as PNG bytes (and closes it)."""
    import io

    plt = _plt()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return buffer.getvalue()


def report_figures(report: ProbeReport) -> list[tuple[ReportFigure, bytes]]:
    """Every figure the report has data for, as (figure, PNG bytes), in :data:`FIGURES` order."""
    out = []
    for spec in FIGURES:
        fig = spec.draw(report)
        if fig is not None:
            out.append((spec, render_png(fig)))
    return out
