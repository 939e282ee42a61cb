"""``compare``: several models' caches of the same examples, probed and compared layer by layer (report.json and a
self-contained report.html)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from ..core.option_names import option
from ..errors import ConfigError
from ..report.compare.options import CompareOptions
from . import base
from .base import app, friendly
from .options import check_before_loading, memory_budget_option, parse_memory_budget, quiet_option, threads_option
from .spec_options import spec_options, takes_specs
from .threads import apply_threads


@app.command("compare")
@friendly
@takes_specs("compare")
def compare(
    caches: list[Path] = typer.Argument(..., metavar="CACHE",
                                        help="Two caches or more, of the same examples (dataset and splits)."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Comparison folder.", show_default="<first cache>.compare beside it"),
    options: CompareOptions = spec_options(CompareOptions),
    memory_budget: Optional[str] = memory_budget_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Compare models from their caches (no backbone needed): probe scores by relative depth, best and expected
    layers, selectivity, and linear CKA across models; prints a summary, writes report.json and report.html."""
    budget = parse_memory_budget(memory_budget)  # refused before the caches are opened
    folder = out if out is not None else caches[0].parent / f"{caches[0].name}.compare"
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{option('out', folder)} is a file, not a folder; choose a folder for the comparison.")
    for k, cache in enumerate(caches):  # the settings, then each cache, before the model stack loads
        check_before_loading(cache, threads, [(CompareOptions, asdict(options))] if k == 0 else [])
    apply_threads(threads)
    from ..report.compare.comparing import compare_caches
    from ..report.compare.saving import save_comparison
    from ..report.compare.summary import render_comparison_summary

    comparison = compare_caches(caches, options=options, progress=not quiet, memory_budget=budget)
    paths = save_comparison(comparison, folder)
    render_comparison_summary(comparison, base.out_console)
    base.out_console.print(f"Comparison written: [bold]{paths.html}[/] (data: {paths.json.name})", soft_wrap=True)
