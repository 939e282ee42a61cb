"""The probing report as one self-contained HTML file: figures embedded as PNG data, no script, no network.

The page opens from disk in any browser, attaches to an e-mail, and renders the same offline: the
style sheet is inline, each figure is a ``data:image/png;base64`` image with alt text, and nothing
is fetched. Every value shown comes from the report's JSON (:class:`~.model.ProbeReport`).
"""

from __future__ import annotations

import base64
import html

import numpy as np

from .figures import report_figures
from .model import ProbeReport
from .summary import summary_rows

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1180px;
       color: #222; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.table-box { max-width: 100%; overflow-x: auto; margin: 0.8em 0; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f5f5f5; } td.text, th.text { text-align: left; }
td.best { font-weight: bold; background: #eef6ee; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; max-width: 900px; }
.meta { color: #555; } .note { color: #8a5a00; }
@media (max-width: 800px) { body { padding: 0 0.5em; } table { font-size: 0.7em; }
                             th, td { padding: 0.15em 0.25em; } }
h2 .about { font-size: 0.6em; font-weight: normal; color: #8a5a00; white-space: normal; }
td .about { font-size: 0.85em; color: #8a5a00; }
"""


def _e(value) -> str:
    return html.escape(str(value))


def _num(value, digits: int = 3) -> str:
    """A number to ``digits`` decimals; one that rounds to zero is 0 (never ``-0.000``); None is a dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        text = f"{value:.{digits}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text
    return _e(value)


def _strength(value) -> str:
    """An L2 strength ``C`` as written in the grid (``0.001``, ``10``): its size, not two decimals (``0.00``)."""
    return "–" if value is None else f"{value:g}"


def _table(header: list[str], rows: list[list[str]], text_columns: int = 1, best: dict | None = None) -> str:
    """An HTML table; the first ``text_columns`` columns are left-aligned; ``best`` marks (row, col) cells."""
    best = best or {}
    head = "".join(f'<th class="{"text" if i < text_columns else ""}">{_e(h)}</th>' for i, h in enumerate(header))
    body = []
    for r, row in enumerate(rows):
        cells = []
        for c, cell in enumerate(row):
            if c < text_columns and "<" not in cell:  # a long name (negation_scope) may wrap after "_"
                cell = cell.replace("_", "_<wbr>")
            classes = " ".join(x for x in ("text" if c < text_columns else "", "best" if best.get((r, c)) else "") if x)
            cells.append(f'<td class="{classes}">{cell}</td>' if classes else f"<td>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    # a table wider than the page (the summary at 700 px) scrolls in its own box instead of being cut
    return f'<div class="table-box"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


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
    rows = [[_e(name)] + [_strength(values[i]) if label == "C" else _num(values[i]) for label, values in columns]
            for i, name in enumerate(names)]
    best = {(t["probe"]["best_index"], 1): True}
    return _table(["layer"] + [label for label, _ in columns], rows, best=best)


def _runs_table(report: ProbeReport) -> str:
    rows = []
    for run in report.runs:
        scores = ", ".join(f"{task} {s['metric']} {_num(s['value'])}" for task, s in run["scores"].items())
        centres = ", ".join(f"{_num(v, 2)}" if key == "shared" else f"{key} {_num(v, 2)}"
                            for key, v in run["expected_layer"].items())
        name = _e(run["name"])
        if run.get("about"):  # the report's own quick per-token-depth head: its scores are not a converged head's
            name += f' <span class="about">({_e(run["about"])})</span>'
        rows.append([name, _e(run["mixer"]), _e(run["scored_on"]), scores or "–", centres or "–",
                     f'<span class="meta">{_e(run["path"])}</span>'])
    return _table(["run", "mixer", "scored on", "scores", "expected layer", "folder"], rows, text_columns=6)


def _token_depth_tables(report: ProbeReport) -> str:
    td = report.token_depth
    mixer = _e(td.get("mixer", "act"))
    parts = [f"<p>From the {mixer} run <code>{_e(td['run'])}</code> on split <b>{_e(td['split'])}</b>: "
             f"{td['n_tokens']:,} tokens, mean depth {td['mean']:.2f}.</p>"]
    for family, rows in td["by_category"]["families"].items():
        parts.append(f"<h3>{_e(family)}</h3>")
        empty = [r["category"] for r in rows if not r.get("count")]
        rows = [r for r in rows if r.get("count")]
        if rows:
            parts.append(_table(["category", "tokens", "mean depth", "sd", "10th-90th percentile"],
                                [[_e(r["category"]), f"{r['count']:,}", _num(r["mean"], 2), _num(r["std"], 2),
                                  f"{_num(r['p10'], 2)} – {_num(r['p90'], 2)}" if "p10" in r else "–"]
                                 for r in rows]))
        if empty:
            parts.append(f'<p class="meta">No tokens of: {_e(", ".join(map(str, empty)))}.</p>')
    return "".join(parts)


def _figure(spec, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="figure-{spec.key}"><img src="data:image/png;base64,{data}" alt="{_e(spec.title)}" '
            f'data-figure="{spec.key}"><figcaption>{_e(spec.caption)}</figcaption></figure>')


def render_html(report: ProbeReport) -> str:
    """The whole report as an HTML document (a string)."""
    meta = report.meta
    figures = {spec.key: _figure(spec, png) for spec, png in report_figures(report)}
    splits = ", ".join(f"{name} {n:,}" for name, n in meta["splits"].items())
    out = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Probe report: {_e(meta['model'])} on {_e(meta['dataset'])}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Probe report: {_e(meta['model'])} on {_e(meta['dataset'])}</h1>",
        f'<p class="meta">Cache <code>{_e(meta["cache"])}</code> · {_e(meta["architecture"])} '
        f'({_e(meta["model_kind"])}), {len(report.layer_names)} states of width {meta["hidden_size"]}, stored '
        f'{_e(meta["storage_dtype"])} ({_e(meta["store"])}) · splits: {_e(splits)} · scores on '
        f'<b>{_e(meta["eval_split"] or "validation")}</b>, C chosen on {_e(meta["validation"] or "a slice of train")} '
        f'· layercache {_e(meta["layercache_version"])}, {_e(meta["created_at"])}</p>',
    ]
    if report.tasks:
        header, rows = summary_rows(report)
        out += ["<h2>Summary</h2>", _table(header, [[_e(c) for c in row] for row in rows], text_columns=2)]
    for key in ("scores", "mdl", "cumulative"):
        if key in figures:
            spec_title = {"scores": "Which layer knows what", "mdl": "Description length",
                          "cumulative": "Cumulative scoring"}[key]
            out += [f"<h2>{spec_title}</h2>", figures[key]]
    if report.tasks:
        out.append("<h2>Per layer</h2>")
        for task, t in report.tasks.items():
            out += [f"<h3>{_e(task)} <span class=\"meta\">({_e(t['kind'])}, {_e(t['metric'])}, "
                    f"read from {_e(t['source'])})</span></h3>", _layer_table(report, task, t)]
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
        about = f' <span class="about">({_e(about)})</span>' if about else ""
        out += [f'<h2 id="token-depth">How deep each token goes{about}</h2>', figures.get("token_depth", ""),
                _token_depth_tables(report)]
    if report.logit_lens is not None:
        out += ["<h2>Logit lens</h2>", figures.get("logit_lens", "")]
    if report.lenses is not None:
        out += ['<h2 id="tuned-lens">Tuned lens</h2>', figures.get("lenses", ""), _lens_table(report.lenses)]
    if report.notes:
        out += ["<h2>Not in this report</h2>", "<ul>"]
        out += [f'<li class="note">{_e(note)}</li>' for note in report.notes]
        out.append("</ul>")
    if report.timings:
        total = float(np.sum(list(report.timings.values())))
        rows = [[_e(part), f"{seconds:.1f}"] for part, seconds in report.timings.items()]
        rows.append(["<b>total</b>", f"<b>{total:.1f}</b>"])
        out += ["<h2>Timings</h2>", _table(["part", "seconds"], rows)]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _lens_table(lenses: dict) -> str:
    """Per layer, each lens's KL to the final layer, next-token bits and top-1 agreement, then how each was fitted
    and its mean prediction depth."""
    scores = lenses["scores"]
    kinds = list(scores)
    names = scores[kinds[0]]["layer_names"]
    header = ["layer", *[f"KL {k}" for k in kinds], *[f"bits {k}" for k in kinds], *[f"agree {k}" for k in kinds]]
    rows = [[_e(name), *[_num(scores[k]["kl"][i], 4) for k in kinds],
             *[_num(scores[k]["cross_entropy_bits"][i], 3) for k in kinds],
             *[_num(scores[k]["agreement"][i], 3) for k in kinds]] for i, name in enumerate(names)]
    fits = "; ".join(f"{name}: {fit['objective']} on {fit['train_tokens']:,} {fit['train_split']} tokens"
                     for name, fit in lenses["fits"].items())
    depths = ", ".join(f"{k} {_num(scores[k]['mean_depth'], 2)}" for k in kinds)
    return (_table(header, rows) + f'<p class="meta">Scored on {_e(lenses["split"])} '
            f'({scores[kinds[0]]["n_tokens"]:,} tokens). Fitted: {_e(fits)}. Mean prediction depth (the first '
            "layer from which every later layer's top token is the final one, as an index of the layers): "
            f"{_e(depths)}.</p>")

