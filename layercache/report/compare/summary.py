"""The comparison's summary, as rows (shared by the HTML page and the terminal) and as tables fitted to a console.

Per task, one row per model: its best layer (chosen on validation) with its relative depth, the score there and at
the last layer, selectivity at the best layer, and the expected layers E_Delta (cumulative gains) and E_s (the full
mix's weights) as relative depths; then one row per pair of models: the CKA of their embeddings, of their last
layers, and the state of the second model most similar to the first's last layer.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ..tables import Column, print_fitted
from .model import Comparison


def fmt(value: Any, digits: int = 3) -> str:
    """A number to ``digits`` decimals, or a dash for None."""
    return "–" if value is None else f"{value:.{digits}f}"


def short(name: str) -> str:
    """``embeddings`` -> ``emb``, ``layer_3`` -> ``3``: a state's name where room is short."""
    return "emb" if name == "embeddings" else name.removeprefix("layer_")


def expected_text(summary: dict[str, Any]) -> str:
    """E_Delta as a relative depth, ``noise (…)`` when no gain lies above zero beyond its interval."""
    text = fmt(summary.get("expected_depth"), 2)
    return f"noise ({text})" if summary.get("expected_layer_is_noise") else text


SCORE_HEADER = ["task", "model", "best layer (depth)", "score", "last layer", "selectivity", "E_Δ depth", "E_s depth"]


def score_rows(comparison: Comparison) -> list[list[str]]:
    """One row per task and model (:data:`SCORE_HEADER`); a model that cannot probe a task says why."""
    rows = []
    for task, entry in comparison.tasks.items():
        for label in comparison.labels:
            model = entry["models"].get(label)
            if model is None:
                if label in entry["skipped"]:
                    rows.append([task, label, "not probed", "–", "–", "–", "–", "–"])
                continue
            s = model["summary"]
            rows.append([task, label, f"{s['best_layer']} ({s['best_depth']:.2f})", f"{fmt(s['best_score'])}",
                         fmt(s["last_score"]), fmt(s["selectivity_at_best"]), expected_text(s),
                         fmt(s["expected_mix_depth"], 2)])
    return rows


CKA_HEADER = ["models", "n", "emb × emb", "last × last", "best match of the first's last layer"]


def cka_rows(comparison: Comparison) -> list[list[str]]:
    """One row per pair of models (:data:`CKA_HEADER`; ``n``: the examples, or words, CKA is on)."""
    rows = []
    for pair in comparison.similarity:
        matrix, match = pair["cka"], pair["best_match_of_rows"][-1]
        best = "–" if match is None else f"{pair['columns'][match]} ({fmt(matrix[-1][match])})"
        rows.append([f"{pair['a']} × {pair['b']}", f"{pair['n']:,}", fmt(matrix[0][0]), fmt(matrix[-1][-1]), best])
    return rows


def layer_rows(comparison: Comparison, task: str) -> list[list[str]]:
    """Per model of ``task``: its scores by state, embeddings first (``emb:0.924 1:0.915``; the best, chosen on
    validation, in bold markup)."""
    rows = []
    for label, model in comparison.tasks[task]["models"].items():
        probe = model["probe"]
        scores = probe["eval"] if probe.get("eval") is not None else probe["validation"]
        best = model["summary"]["best_index"]
        names = comparison.model(label)["layer_names"]
        cells = [f"{short(n)}:{'[bold]' if i == best else ''}{fmt(v)}{'[/]' if i == best else ''}"  # wraps between
                 for i, (n, v) in enumerate(zip(names, scores))]
        rows.append([label, " ".join(cells)])
    return rows


def cka_name(comparison: Comparison, capital: bool = False) -> str:
    """The estimator the comparison's CKA used, in words: ``debiased linear CKA`` or ``linear CKA`` (a comparison
    saved before the choice existed used the plain one); ``capital``: its first letter upper case."""
    name = "debiased linear CKA" if comparison.meta["cka"].get("estimator") == "debiased" else "linear CKA"
    return name[0].upper() + name[1:] if capital else name


def cka_about(comparison: Comparison) -> str:
    """What the CKA is on, in words: ``1,000 mean vectors of test``, ``2,000 word states of test``."""
    cka = comparison.meta["cka"]
    what = "word states" if cka["states"] == "words" else "mean vectors"
    return f"{cka.get('n') or 0:,} {what} of {cka['split']}"


def render_comparison_summary(comparison: Comparison, console: Console) -> None:
    """Print the scores of every task and model, the CKA of every pair and the notes, fitted to the console."""
    split = comparison.meta["eval_split"] or "validation"
    for task, entry in comparison.tasks.items():
        print_fitted(console, [Column("model", key=True), Column("score by state (emb: embeddings)", wrap=True)],
                     layer_rows(comparison, task), title=f"{task} ({entry['metric']} on {split})",
                     title_justify="left")
    if comparison.tasks:
        columns = [Column(h, key=h in ("task", "model"), justify="left" if h in ("task", "model") else "right")
                   for h in SCORE_HEADER]
        print_fitted(console, columns, score_rows(comparison), title="best and expected layers (depth: 0 = "
                     "embeddings, 1 = last layer)", title_justify="left")
    columns = [Column(h, key=h == "models", justify="left" if h == "models" else "right") for h in CKA_HEADER]
    print_fitted(console, columns, cka_rows(comparison),
                 title=f"{cka_name(comparison)} across models ({cka_about(comparison)})", title_justify="left")
    for note in comparison.notes:
        console.print(f"[yellow]{note}[/]", highlight=False)
