"""What a reader would call a broken plot, measured on the drawn matplotlib figure.

``figure_problems(fig)`` lists, in one sentence each: a legend drawn over a line's points or
segments or over a bar, tick labels of one axis that overlap each other, and text cut off at the
figure's edge. The report's figures and the notebooks' figures are checked with it.
"""

from __future__ import annotations

import numpy as np


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _legends(fig) -> list:
    found = list(fig.legends)
    found += [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [legend for legend in found if legend.get_visible()]


def _line_points(line, samples: int = 12) -> np.ndarray:
    """A line's points and points along its segments, in display coordinates (NaN gaps dropped)."""
    xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
    if line.get_linestyle() in ("None", "", " ") or len(xy) < 2:
        points = xy
    else:
        t = np.linspace(0, 1, samples)[:, None, None]
        points = (xy[:-1][None] * (1 - t) + xy[1:][None] * t).reshape(-1, 2)
    return points[np.isfinite(points).all(axis=1)]


def legend_overlaps(fig) -> list[str]:
    """Each legend that covers a data point, a stretch of a line or a bar of any panel."""
    from matplotlib.patches import Rectangle

    renderer = _renderer(fig)
    problems = []
    for legend in _legends(fig):
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            clip = ax.get_window_extent(renderer)
            for line in ax.get_lines():
                if not line.get_visible() or not len(line.get_xydata()):
                    continue
                points = _line_points(line)
                inside_axes = ((points[:, 0] >= clip.x0) & (points[:, 0] <= clip.x1)
                               & (points[:, 1] >= clip.y0) & (points[:, 1] <= clip.y1))
                points = points[inside_axes]
                covered = ((points[:, 0] > box.x0) & (points[:, 0] < box.x1)
                           & (points[:, 1] > box.y0) & (points[:, 1] < box.y1))
                if covered.any():
                    problems.append(f"a legend covers the line {line.get_label()!r} of {ax.get_title()!r}")
            for patch in ax.patches:
                if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_height() != 0:
                    bar = patch.get_window_extent(renderer)
                    if bar.width > 0 and bar.overlaps(box):
                        problems.append(f"a legend covers a bar of {ax.get_title()!r}")
                        break
    return problems


def tick_label_overlaps(fig) -> list[str]:
    """Each axis whose tick labels run into each other."""
    renderer = _renderer(fig)
    problems = []
    for ax in fig.axes:
        for name, labels in (("x", ax.get_xticklabels()), ("y", ax.get_yticklabels())):
            boxes = [label.get_window_extent(renderer) for label in labels
                     if label.get_visible() and label.get_text()]
            for a, b in zip(boxes, boxes[1:]):
                if a.overlaps(b):
                    problems.append(f"the {name} tick labels of {ax.get_title()!r} overlap")
                    break
    return problems


def _texts(fig) -> list:
    """The texts a reader sees: titles, axis labels, shown tick labels, annotations and legend entries."""
    texts = list(fig.texts)
    for legend in _legends(fig):
        texts += legend.get_texts()
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    texts += [tick.label1, tick.label2]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def cut_text(fig) -> list[str]:
    """Each visible text (titles, labels, shown tick labels, legend entries) that runs past the figure's edge."""
    renderer = _renderer(fig)
    frame = fig.bbox
    problems = []
    for text in _texts(fig):
        box = text.get_window_extent(renderer)
        if box.x0 < frame.x0 - 1 or box.x1 > frame.x1 + 1 or box.y0 < frame.y0 - 1 or box.y1 > frame.y1 + 1:
            problems.append(f"the text {text.get_text()!r} is cut at the figure's edge")
    return problems


def figure_problems(fig) -> list[str]:
    """Every problem :func:`legend_overlaps`, :func:`tick_label_overlaps` and :func:`cut_text` find."""
    return legend_overlaps(fig) + tick_label_overlaps(fig) + cut_text(fig)
