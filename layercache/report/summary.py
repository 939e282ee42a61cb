"""The probing report's summary, as rows (shared by the HTML page and the terminal) and as rich tables."""

from __future__ import annotations

from rich.console import Console

from .model import ProbeReport
from .tables import Column, print_fitted


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summary_rows(report: ProbeReport) -> tuple[list[str], list[list[str]]]:
    """Header and one row per task: best layer and its score, selectivity, MDL, expected layers, depth."""
    split = report.meta["eval_split"] or "validation"
    header = ["task", "kind", "best layer", f"score ({split})", "selectivity", "MDL best (compression)",
              "E_Δ (cumulative)", "E_s (mix weights)", "mean prediction depth"]
    rows = []
    for task, t in report.tasks.items():
        best = t["probe"]["best_index"]
        scores = t["probe"]["eval"] if t["probe"].get("eval") is not None else t["probe"]["validation"]
        selectivity = t["control"]["selectivity"][best] if "control" in t else None
        mdl = t.get("mdl")
        mdl_text = "–" if mdl is None else f"{mdl['best_layer']} ({max(v or 0 for v in mdl['compression']):.2f})"
        cum = t.get("cumulative") or {}
        depth = t.get("prediction_depth") or {}
        rows.append([task, t["kind"], t["probe"]["best_layer"], f"{_fmt(scores[best])} {t['metric']}",
                     _fmt(selectivity), mdl_text, _expected_layer_text(cum),
                     _fmt(cum.get("expected_layer_of_mix"), 2), _fmt(depth.get("mean"), 2)])
    return header, rows


def _expected_layer_text(cum: dict) -> str:
    """E_Δ, or "noise (E_Δ)" when no layer's gain lies above 0 beyond its bootstrap interval."""
    text = _fmt(cum.get("expected_layer"), 2)
    return f"noise ({text})" if cum.get("expected_layer_is_noise") else text


SUMMARY_COLUMNS = {  # how the terminal shows each summary column: the task names its row
    "task": Column("task", key=True), "kind": Column("kind"), "best layer": Column("best layer"),
    "selectivity": Column("selectivity", justify="right"), "E_Δ (cumulative)": Column("E_Δ (cumulative)", "right"),
    "E_s (mix weights)": Column("E_s (mix weights)", "right"),
    "mean prediction depth": Column("mean prediction depth", "right"),
}


def render_probe_summary(report: ProbeReport, console: Console) -> None:
    """Print the score and selectivity of every task by layer (best bold), then the summary table.

    Both fit the console's width (:func:`~.tables.fitted_tables`): headers wrap and a table too wide
    is split into parts that repeat the task, so no score or layer name is cut.
    """
    names = report.layer_names
    split = report.meta["eval_split"] or "validation"
    by_layer = [Column("task", key=True), Column("metric", key=True),
                *[Column(n.removeprefix("layer_"), justify="right") for n in names]]
    rows = []
    for task, t in report.tasks.items():
        scores = t["probe"]["eval"] if t["probe"].get("eval") is not None else t["probe"]["validation"]
        best = t["probe"]["best_index"]
        cells = [f"[bold green]{_fmt(v)}[/]" if i == best else _fmt(v) for i, v in enumerate(scores)]
        rows.append([task, t["metric"], *cells])
        if "control" in t:
            rows.append(["", "selectivity", *[_fmt(v) for v in t["control"]["selectivity"]]])
        for name, part in (t.get("per_layer") or {}).items():  # every other registered probe: one row
            values = part["eval"] if part.get("eval") is not None else part["validation"]
            rows.append(["", f"{name} {part['metric']}", *[_fmt(v) for v in values]])
    print_fitted(console, by_layer, rows, title=f"probe score by layer on {split} (control task: selectivity = "
                                              "score - control)", title_justify="left")
    header, rows = summary_rows(report)
    print_fitted(console, [SUMMARY_COLUMNS.get(h, Column(h)) for h in header], rows, title="summary",
                 title_justify="left")
    if report.token_depth is not None:
        td = report.token_depth
        mixer = td.get("mixer", "act")
        console.print(f"{mixer} depth per token ({td['split']}): mean {td['mean']:.2f} over {td['n_tokens']:,} tokens; "
                      "by category in the HTML report.")
    if report.logit_lens is not None:
        acc = report.logit_lens["accuracy"]
        console.print("logit lens next-token accuracy by layer: " + ", ".join(_fmt(a) for a in acc))
    if report.lenses is not None:
        for name, s in report.lenses["scores"].items():
            console.print(f"{name} lens KL to the final layer by layer: " + ", ".join(_fmt(v, 4) for v in s["kl"]))
    for task, t in report.tasks.items():
        note = (t.get("cumulative") or {}).get("noise_note")
        if note:
            console.print(f"{task}: {note}", highlight=False)
    for note in report.notes:
        console.print(f"[yellow]{note}[/]")
