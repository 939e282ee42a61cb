"""The comparison as one self-contained HTML file, in the probe report's style and with its own pieces.

The style sheet, the tables and the figures' markup are the probe report's (:mod:`layercache.report.html`), so the
two pages read alike: figures embedded as ``data:image/png;base64`` images with alt text, no script, nothing
fetched. Every value shown comes from the comparison's JSON (:class:`~.model.Comparison`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..html_page import STYLE, escaped, figure_html, html_table, number_cell
from .figures import comparison_figures
from .model import Comparison
from .summary import CKA_HEADER, SCORE_HEADER, cka_about, cka_name, cka_rows, score_rows

SIDE_BY_SIDE = """
.side { display: flex; flex-wrap: wrap; gap: 0 2em; align-items: flex-start; }
.side > div { max-width: 100%; } .side figure { max-width: 560px; }
h4 { margin: 0.8em 0 0.2em 0; }
"""
"""What the comparison adds to the probe report's style: one model's table (or one pair's heatmap) beside the
next, wrapping where the page is narrow."""


def _models_table(comparison: Comparison) -> str:
    rows = []
    for m in comparison.models:
        width = f"{m['width']}" if m["width"] == m["model_width"] else f"{m['width']} of {m['model_width']}"
        storage = m["storage_dtype"] + (f", projected to K={m['project']}" if m.get("project") else "")
        storage += "" if m["store"] == "tokens" else ", pooled vectors only"
        rows.append([escaped(m["label"]), escaped(m["model"]), escaped(f"{m['architecture']} ({m['kind']})"),
                     f"{len(m['layer_names'])} of {m['n_layers'] + 1}", width, escaped(storage),
                     f'<span class="meta">{escaped(m["cache"])}</span>'])
    return html_table(["model", "backbone", "family", "states kept", "width", "stored", "cache"], rows, text_columns=7)


def _layer_table(comparison: Comparison, label: str, model: dict[str, Any]) -> str:
    """One row per state of one model on one task: relative depth, scores, control, selectivity, mix 0..l."""
    entry = comparison.model(label)
    columns: list[tuple[str, Any]] = [("depth", entry["relative_depth"]), ("validation", model["probe"]["validation"])]
    if model["probe"].get("eval") is not None:
        columns.append((str(comparison.meta["eval_split"]), model["probe"]["eval"]))
    control = model.get("control")
    if control is not None:
        columns.append(("control", control["eval"] if control.get("eval") is not None else control["validation"]))
        columns.append(("selectivity", control["selectivity"]))
    if model.get("cumulative") is not None:
        columns.append(("mix 0..l", model["cumulative"]["scores"]))
    rows = [[escaped(name)] + [number_cell(values[i], 2 if title == "depth" else 3) for title, values in columns]
            for i, name in enumerate(entry["layer_names"])]
    best = {(model["summary"]["best_index"], 2): True}
    return html_table(["state"] + [title for title, _ in columns], rows, best=best)


def _meta(comparison: Comparison) -> str:
    meta = comparison.meta
    splits = ", ".join(f"{name} {n:,}" for name, n in meta["splits"].items())
    sample = "every training example" if meta["max_train"] is None else \
        f"a seeded sample of at most {meta['max_train']:,} training examples (words)"
    return (f'<p class="meta">Data: {escaped(meta["dataset"] or "files")} · splits: {escaped(splits)} · scores on '
            f'<b>{escaped(meta["eval_split"] or "validation")}</b>, C chosen on '
            f'{escaped(meta["validation"] or "a slice of train")}, probes fitted on {escaped(sample)}, the same for '
            'every model · '
            f'{escaped(cka_name(comparison))} on {escaped(cka_about(comparison))} · seed {meta["seed"]} · '
            f'layercache {escaped(meta["layercache_version"])}, {escaped(meta["created_at"])}</p>')


def render_comparison_html(comparison: Comparison) -> str:
    """The whole comparison as an HTML document (a string)."""
    figures = {spec.key: figure_html(spec, png) for spec, png in comparison_figures(comparison)}
    names = ", ".join(comparison.labels)
    title = f"Model comparison: {names} on {comparison.meta['dataset'] or 'files'}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{escaped(title)}</title>",
           f"<style>{STYLE}{SIDE_BY_SIDE}</style></head><body>", f"<h1>{escaped(title)}</h1>", _meta(comparison),
           "<h2>Models</h2>", _models_table(comparison)]
    if comparison.tasks:
        out += ["<h2>Summary</h2>", '<p class="meta">Depth: a state\'s layer over the model\'s layers (0 = embeddings, '
                "1 = last layer). E_Δ: the expected layer of the cumulative gains (Tenney et al.); E_s: of the full "
                "mix's weights.</p>",
                html_table(SCORE_HEADER, [[escaped(c) for c in row] for row in score_rows(comparison)], text_columns=2)]
    for key, heading in (("scores", "Which depth knows what"), ("selectivity", "Selectivity")):
        if key in figures:
            out += [f"<h2>{heading}</h2>", figures[key]]
    if comparison.tasks:
        out.append("<h2>Per state</h2>")
        for task, entry in comparison.tasks.items():
            about = f"{escaped(entry['kind'])}, {escaped(entry['metric'])}"
            out.append(f"<h3>{escaped(task)} <span class=\"meta\">({about})</span></h3>")
            out.append('<div class="side">')
            for label, model in entry["models"].items():
                source = f"<span class=\"meta\">(read from {escaped(model['source'])})</span>"
                out += [f"<div><h4>{escaped(label)} {source}</h4>",
                        _layer_table(comparison, label, model), "</div>"]
            out.append("</div>")
            for label, reason in entry["skipped"].items():
                out.append(f'<p class="note">{escaped(label)}: not probed ({escaped(reason)}).</p>')
    out.append(f"<h2>{escaped(cka_name(comparison, capital=True))} across models</h2>")
    out.append(html_table(CKA_HEADER, [[escaped(c) for c in row] for row in cka_rows(comparison)]))
    out += ['<div class="side">', *[html for key, html in figures.items() if key.startswith("cka-")], "</div>"]
    if comparison.notes:
        notes = [f'<li class="note">{escaped(note)}</li>' for note in comparison.notes]
        out += ["<h2>Notes</h2>", "<ul>", *notes, "</ul>"]
    if comparison.timings:
        total = float(np.sum(list(comparison.timings.values())))
        rows = [[escaped(part), f"{seconds:.1f}"] for part, seconds in comparison.timings.items()]
        rows.append(["<b>total</b>", f"<b>{total:.1f}</b>"])
        out += ["<h2>Timings</h2>", html_table(["part", "seconds"], rows)]
    out.append("</body></html>")
    return "\n".join(out) + "\n"
