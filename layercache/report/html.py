"""The probing report as one self-contained HTML file: figures embedded as PNG data, no script, no network.

The page opens from disk in any browser, attaches to an e-mail, and renders the same offline: the
style sheet is inline, each figure is a ``data:image/png;base64`` image with alt text, and nothing
is fetched. Every value shown comes from the report's JSON (:class:`~.model.ProbeReport`).
"""

from __future__ import annotations

import numpy as np

from .figures import report_figures
from .html_page import STYLE, escaped, figure_html, html_table, number_cell
from .model import ProbeReport
from .summary import summary_rows


def _strength(value) -> str:
    """An L2 strength ``C`` as written in the grid (``0.001``, ``10``): its size, not two decimals (``0.00``)."""
    return "–" if value is None else f"{value:g}"


def _layer_table(report: ProbeReport, task: str, t: dict) -> str:
    """One row per layer: validation and evaluation scores, control, selectivity, MDL, cumulative score, and a
    column per other registered probe (the task's ``per_layer`` entries)."""
    names = report.layer_names
    columns: list[tuple[str, list]] = [("validation", t["probe"]["validation"])]
    if t["probe"].get("eval") is not None:
        columns.append((f"{report.meta['eval_split']}", t["probe"]["eval"]))
    columns.append(("C", t["probe"]["C"]))
    if "control" in t:
        control = t["control"]
        columns.append(("control", control["eval"] if control.get("eval") is not None else control["validation"]))
        columns.append(("selectivity", control["selectivity"]))
    if "mdl" in t:
        columns.append(("MDL kbits", [None if v is None else v / 1000 for v in t["mdl"]["codelength_bits"]]))
        columns.append(("compression", t["mdl"]["compression"]))
    if "cumulative" in t:
        columns.append(("mix 0..l", t["cumulative"]["scores"]))
        columns.append(("gain", t["cumulative"]["gains"]))
    for name, part in (t.get("per_layer") or {}).items():  # every other registered probe: one column
        columns.append((f"{name} ({part['metric']})", part["eval"] if part.get("eval") is not None
                        else part["validation"]))
    rows = [[escaped(name)] + [_strength(values[i]) if label == "C" else number_cell(values[i])
                               for label, values in columns]
            for i, name in enumerate(names)]
    best = {(t["probe"]["best_index"], 1): True}
    return html_table(["layer"] + [label for label, _ in columns], rows, best=best)


def _runs_table(report: ProbeReport) -> str:
    rows = []
    for run in report.runs:
        scores = ", ".join(f"{task} {s['metric']} {number_cell(s['value'])}" for task, s in run["scores"].items())
        centres = ", ".join(f"{number_cell(v, 2)}" if key == "shared" else f"{key} {number_cell(v, 2)}"
                            for key, v in run["expected_layer"].items())
        name = escaped(run["name"])
        if run.get("about"):  # the report's own quick per-token-depth head: its scores are not a converged head's
            name += f' <span class="about">({escaped(run["about"])})</span>'
        rows.append([name, escaped(run["mixer"]), escaped(run["scored_on"]), scores or "–", centres or "–",
                     f'<span class="meta">{escaped(run["path"])}</span>'])
    return html_table(["run", "mixer", "scored on", "scores", "expected layer", "folder"], rows, text_columns=6)


def _token_depth_tables(report: ProbeReport) -> str:
    td = report.token_depth
    mixer = escaped(td.get("mixer", "act"))
    parts = [f"<p>From the {mixer} run <code>{escaped(td['run'])}</code> on split <b>{escaped(td['split'])}</b>: "
             f"{td['n_tokens']:,} tokens, mean depth {td['mean']:.2f}.</p>"]
    for family, rows in td["by_category"]["families"].items():
        parts.append(f"<h3>{escaped(family)}</h3>")
        empty = [r["category"] for r in rows if not r.get("count")]
        rows = [r for r in rows if r.get("count")]
        if rows:
            parts.append(html_table(["category", "tokens", "mean depth", "sd", "10th-90th percentile"],
                                [[escaped(r["category"]), f"{r['count']:,}", number_cell(r["mean"], 2),
                                  number_cell(r["std"], 2),
                                  f"{number_cell(r['p10'], 2)} – {number_cell(r['p90'], 2)}" if "p10" in r else "–"]
                                 for r in rows]))
        if empty:
            parts.append(f'<p class="meta">No tokens of: {escaped(", ".join(map(str, empty)))}.</p>')
    return "".join(parts)


def render_html(report: ProbeReport) -> str:
    """The whole report as an HTML document (a string)."""
    meta = report.meta
    figures = {spec.key: figure_html(spec, png) for spec, png in report_figures(report)}
    splits = ", ".join(f"{name} {n:,}" for name, n in meta["splits"].items())
    out = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Probe report: {escaped(meta['model'])} on {escaped(meta['dataset'])}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Probe report: {escaped(meta['model'])} on {escaped(meta['dataset'])}</h1>",
        f'<p class="meta">Cache <code>{escaped(meta["cache"])}</code> · {escaped(meta["architecture"])} '
        f'({escaped(meta["model_kind"])}), {len(report.layer_names)} states of width {meta["hidden_size"]}, stored '
        f'{escaped(meta["storage_dtype"])} ({escaped(meta["store"])}) · splits: {escaped(splits)} · scores on '
        f'<b>{escaped(meta["eval_split"] or "validation")}</b>, C chosen on '
        f'{escaped(meta["validation"] or "a slice of train")} '
        f'· layercache {escaped(meta["layercache_version"])}, {escaped(meta["created_at"])}</p>',
    ]
    if report.tasks:
        header, rows = summary_rows(report)
        out += ["<h2>Summary</h2>", html_table(header, [[escaped(c) for c in row] for row in rows], text_columns=2)]
    for key in ("scores", "mdl", "cumulative"):
        if key in figures:
            spec_title = {"scores": "Which layer knows what", "mdl": "Description length",
                          "cumulative": "Cumulative scoring"}[key]
            out += [f"<h2>{spec_title}</h2>", figures[key]]
    if report.tasks:
        out.append("<h2>Per layer</h2>")
        for task, t in report.tasks.items():
            out += [f"<h3>{escaped(task)} <span class=\"meta\">({escaped(t['kind'])}, {escaped(t['metric'])}, "
                    f"read from {escaped(t['source'])})</span></h3>", _layer_table(report, task, t)]
            if "control" in t and not t["control"].get("converged", True):
                out.append(f'<p class="note">The control probes stopped at {t["control"]["max_iter"]} iterations '
                           "before full convergence: their scores may be slightly low, selectivity slightly high.</p>")
    if report.runs or "layer_weights" in figures:
        out.append("<h2>Layer weights</h2>")
        if report.runs:
            out.append(_runs_table(report))
        out.append(figures.get("layer_weights", ""))
    for key, title in (("similarity", "Layer similarity"), ("prediction_depth", "Prediction depth")):
        if key in figures:
            out += [f"<h2>{title}</h2>", figures[key]]
    if report.token_depth is not None:
        about = report.token_depth.get("about")
        about = f' <span class="about">({escaped(about)})</span>' if about else ""
        out += [f'<h2 id="token-depth">How deep each token goes{about}</h2>', figures.get("token_depth", ""),
                _token_depth_tables(report)]
    if report.logit_lens is not None:
        out += ["<h2>Logit lens</h2>", figures.get("logit_lens", "")]
    if report.lenses is not None:
        out += ['<h2 id="tuned-lens">Tuned lens</h2>', figures.get("lenses", ""), _lens_table(report.lenses)]
    if report.notes:
        out += ["<h2>Not in this report</h2>", "<ul>"]
        out += [f'<li class="note">{escaped(note)}</li>' for note in report.notes]
        out.append("</ul>")
    if report.timings:
        total = float(np.sum(list(report.timings.values())))
        rows = [[escaped(part), f"{seconds:.1f}"] for part, seconds in report.timings.items()]
        rows.append(["<b>total</b>", f"<b>{total:.1f}</b>"])
        out += ["<h2>Timings</h2>", html_table(["part", "seconds"], rows)]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _lens_table(lenses: dict) -> str:
    """Per layer, each lens's KL to the final layer, next-token bits and top-1 agreement, then how each was fitted
    and its mean prediction depth."""
    scores = lenses["scores"]
    kinds = list(scores)
    names = scores[kinds[0]]["layer_names"]
    header = ["layer", *[f"KL {k}" for k in kinds], *[f"bits {k}" for k in kinds], *[f"agree {k}" for k in kinds]]
    rows = [[escaped(name), *[number_cell(scores[k]["kl"][i], 4) for k in kinds],
             *[number_cell(scores[k]["cross_entropy_bits"][i], 3) for k in kinds],
             *[number_cell(scores[k]["agreement"][i], 3) for k in kinds]] for i, name in enumerate(names)]
    fits = "; ".join(f"{name}: {fit['objective']} on {fit['train_tokens']:,} {fit['train_split']} tokens"
                     for name, fit in lenses["fits"].items())
    depths = ", ".join(f"{k} {number_cell(scores[k]['mean_depth'], 2)}" for k in kinds)
    return (html_table(header, rows) + f'<p class="meta">Scored on {escaped(lenses["split"])} '
            f'({scores[kinds[0]]["n_tokens"]:,} tokens). Fitted: {escaped(fits)}. Mean prediction depth (the first '
            "layer from which every later layer's top token is the final one, as an index of the layers): "
            f"{escaped(depths)}.</p>")

