"""``probe-report``: every layer probed from the cache, written as report.json and a self-contained report.html."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from ..depth.lens_options import LensOptions
from ..report.report_options import ReportOptions
from . import base
from .base import app, friendly
from .options import (
    cache_argument,
    check_before_loading,
    memory_budget_option,
    parse_memory_budget,
    quiet_option,
    threads_option,
)
from .spec_options import spec_options, takes_specs
from .threads import apply_threads


@app.command("probe-report")
@friendly
@takes_specs("probe-report")
def probe_report(
    cache: Optional[Path] = cache_argument(),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Report folder.", show_default="<cache>.report beside the cache"),
    options: ReportOptions = spec_options(ReportOptions),
    lens: LensOptions = spec_options(LensOptions,
                                     only=("epochs", "lr", "batch_tokens", "max_tokens", "logits_dtype")),
    memory_budget: Optional[str] = memory_budget_option(),
    threads: str = threads_option(),
    quiet: bool = quiet_option(),
):
    """Probe every layer of a cache (no backbone needed): prints a summary, writes report.json and report.html."""
    budget = parse_memory_budget(memory_budget)  # refused before the cache is opened
    check_before_loading(cache, threads, [(ReportOptions, asdict(options))]
                         + ([(LensOptions, asdict(lens))] if options.tuned_lens else []))
    apply_threads(threads)
    from ..report.probing import probe_report as run_probe_report
    from ..report.summary import render_probe_summary

    report, paths = run_probe_report(
        cache, out, options=options, lens=lens, progress=not quiet, memory_budget=budget,
        say=lambda line: base.err_console.print(line, highlight=False, soft_wrap=True))
    render_probe_summary(report, base.out_console)
    base.out_console.print(f"Report written: [bold]{paths.html}[/] (data: {paths.json.name})", soft_wrap=True)
