"""Peak memory under ``--memory-budget`` (issue 28): probes and train-head on caches larger than the budget.

Each measurement runs in a fresh interpreter and reads its own peak resident memory (``VmHWM``) twice:
after the imports and the opened cache (the baseline), and after the work. ``--before DIR`` runs a
measurement with another checkout of layercache (e.g. ``git archive HEAD`` unpacked into a folder), so
the code before the budget is measured on the same machine, the same caches and the same seeds. Every
call is public: :func:`layercache.report.probe_report`, :class:`layercache.probes.LinearProbes` under
:func:`layercache.memory_limit`, :func:`layercache.train_head` with ``memory_budget``.

1. conll - the CoNLL-2003 token probes of ``probe-report`` (linear probes and their prediction depth,
   the control task, MDL and cumulative scoring of the ``ner`` task, the report's defaults: a seeded
   sample of 4,000 training words, a seeded 10 % of the train sentences validating, scores on the
   held-out split; no ``act`` head, and the report's HTML written to a temporary folder) on a MiniLM
   cache of the whole train file (~204k words, 7 states x 384) and ``valid.txt`` as the held-out split:
   peak RSS without a budget and with ``--memory-budget 1GB``, and whether every score is the same. The
   cache is extracted into ``--cache-dir`` when missing (``layercache extract minilm --split
   train=.../train.txt --split test=.../valid.txt``).
2. train - ``train-head`` (``--mixer scalar``, one epoch) on token states of 10k and 100k examples
   (AG News texts repeated to 100k rows, through the tiny random BERT of ``tests/tiny_models.py``: 3 states
   x 32, so the cache, not the model, is what grows): peak RSS by size, with and without a budget.

``--quick`` (about a minute, after the first run's extractions): part 1 as the ner task's
``LinearProbes`` alone (fitted on a 1,000-word sample, scored on the held-out split) on the first 1,000
sentences of each CoNLL file, without a budget and under 64 MiB (the held-out split's features are
~160 MB); part 2 on 2,000 examples, without a budget and under 64 MiB. It asserts what does not depend on
timing: the probes' scores are the same with and without a budget, and their peak under the budget lies
below their peak without one. (The head's metrics are reported, not asserted: the feed's blocks, which its
epochs shuffle by, are sized by the budget.) ``--quick`` runs the children on the idle cores (``auto``).

Prints tables and writes JSON (default ``benchmarks/results/memory.json``, ``memory-quick.json`` with
``--quick``) with the headline ``figures`` (peak MB above the baseline, seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from _common import DEFAULT_DATA, HERE, REPO, loadavg, machine_meta, write_results  # noqa: E402

DEFAULT_CACHE_DIR = Path("/tmp/mem-bench")
TRAIN_SIZES = (10_000, 100_000)
QUICK = {"conll_limit": 1000, "probe_max_train": 1000, "budget": "64MiB", "train_sizes": (2_000,),
         "train_budget": "64MiB"}
UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
         "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


def parse_size(text: str) -> int:
    """``256MiB``, ``1GB``, ``4096`` -> bytes (the units ``--memory-budget`` takes)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*", text, re.IGNORECASE)
    if not match or match.group(2).lower() not in UNITS:
        raise SystemExit(f"size {text!r} is not understood; write e.g. 256MiB, 1GB or 4096")
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


def peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak() -> None:
    """Start ``VmHWM`` again from the current RSS (Linux: write 5 to clear_refs), so the baseline is the imports'."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# children


def child_threads() -> int | None:
    """The children's torch threads: 2 (the full run), or None, the idle cores (``--quick``: its timing is not
    judged, and 2 threads beside a busy process run many times slower)."""
    value = os.environ.get("MEMORY_BENCH_THREADS", "2")
    return None if value == "auto" else int(value)


def budgeted(budget: int | None):
    """The work under ``--memory-budget budget``, or as the library runs it by default (None)."""
    from contextlib import nullcontext

    from layercache import memory_limit

    return nullcontext() if budget is None else memory_limit(budget)


def floats(x):
    import numpy as np

    return None if x is None else [float(v) for v in np.asarray(x, np.float64).ravel()]


def conll_child(cache_path: str, budget: int | None) -> dict:
    """The ner task's part of the probe report (no act head), its report written to a temporary folder."""
    from layercache import LayerCache, use_threads  # kept by every computing call, even at torch's default count
    from layercache.report import probe_report

    use_threads(child_threads())
    with LayerCache.open(cache_path) as cache, tempfile.TemporaryDirectory() as out:
        cache.lengths("train")
        baseline = peak_rss_mb()
        t0 = time.perf_counter()
        report, _ = probe_report(cache, out, tasks=["ner"], seed=0, train_act=False, progress=False,
                                 memory_budget=budget)
        seconds = time.perf_counter() - t0
    task = report.tasks["ner"]
    scores = {"probe_validation": floats(task["probe"]["validation"]), "probe_eval": floats(task["probe"]["eval"]),
              "C": floats(task["probe"]["C"]), "control_validation": floats(task["control"]["validation"]),
              "control_eval": floats(task["control"]["eval"]),
              "depth_counts": floats(task["prediction_depth"]["counts"]),
              "mdl_bits": floats(task["mdl"]["codelength_bits"]),
              "cumulative_validation": floats(task["cumulative"]["validation"]),
              "cumulative_eval": floats(task["cumulative"].get("eval"))}
    return {"baseline_mb": baseline, "peak_mb": peak_rss_mb(), "seconds": seconds, "scores": scores,
            "n_train": task["probe"]["n_train"], "n_train_available": task["probe"]["n_train_available"],
            "timings": report.timings, "loadavg": loadavg()}


def linear_child(cache_path: str, budget: int | None, max_train: int | None = None) -> dict:
    """The linear probes of the ner task alone (fit with the defaults, or on ``max_train`` words; scored on the
    held-out split)."""
    from layercache import LayerCache, use_threads  # kept by every computing call, even at torch's default count
    from layercache.probes import LinearProbes

    use_threads(child_threads())
    options = {} if max_train is None else {"max_train": max_train}
    with LayerCache.open(cache_path) as cache:
        cache.lengths("train")
        baseline = peak_rss_mb()
        t0 = time.perf_counter()
        with budgeted(budget):
            probes = LinearProbes(task="ner", seed=0, **options).fit(cache)
            test = probes.score(cache, "test")
        seconds = time.perf_counter() - t0
    scores = {"validation": floats(probes.scores_), "test": floats(test), "C": floats(probes.C_),
              "grid_losses": floats(probes.grid_losses_)}
    return {"baseline_mb": baseline, "peak_mb": peak_rss_mb(), "seconds": seconds, "scores": scores,
            "n_train": int(probes.n_train_), "n_train_available": int(probes.n_train_available_),
            "n_val": int(probes.n_val_), "loadavg": loadavg()}


def train_child(cache_path: str, budget: int | None, out: str) -> dict:
    from layercache import LayerCache, train_head, use_threads

    use_threads(child_threads())  # kept by every computing call, even at torch's default count
    with LayerCache.open(cache_path) as cache:
        n = cache.num_examples("train")
        tokens = int(cache.lengths("train").sum())
        baseline = peak_rss_mb()
        t0 = time.perf_counter()
        result = train_head(cache, "scalar", out=out, overwrite=True, epochs=1, progress=False, source="tokens",
                            memory_budget=budget)
        seconds = time.perf_counter() - t0
    return {"examples": n, "tokens": tokens, "baseline_mb": baseline, "peak_mb": peak_rss_mb(), "seconds": seconds,
            "scores": json.loads(json.dumps(result.metrics.get("validation"), default=str)),
            "loadavg": loadavg()}


def run_child(args: list[str], code: Path | None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    env = os.environ.copy()
    if code is not None:
        env["MEMORY_BENCH_CODE"] = str(code)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# caches


def conll_cache(data: Path, cache_dir: Path, limit: int | None) -> Path:
    from layercache import extract

    path = cache_dir / ("conll" if limit is None else f"conll-{limit}")
    extract("minilm", None, path, split_files={"train": str(data / "conll2003/train.txt"),
                                               "test": str(data / "conll2003/valid.txt")},
            limit=limit, device="cpu", progress=False)
    return path


def agnews_caches(data: Path, cache_dir: Path, sizes: tuple[int, ...]) -> dict[int, Path]:
    """Tiny-BERT caches of the AG News dev texts repeated to the largest size, and of their first N for each size."""
    from layercache import extract

    sys.path.insert(0, str(REPO / "tests"))
    from tiny_models import make_model

    model = cache_dir / "tiny-bert"
    if not (model / "config.json").is_file():
        make_model(model, "bert")
    rows = (data / "agnews/dev.tsv").read_text(encoding="utf-8").splitlines()
    rows = [r for r in rows if "\t" in r]
    big = cache_dir / f"agnews-{max(sizes) // 1000}k.tsv"
    if not big.is_file():
        big.write_text("\n".join((rows * (max(sizes) // len(rows) + 1))[:max(sizes)]) + "\n", encoding="utf-8")
    out = {}
    for n in sizes:
        path = cache_dir / f"agnews-tiny-{n // 1000}k-of-{max(sizes) // 1000}k"
        extract(str(model), None, path, split_files={"train": str(big)}, limit=n, device="cpu", progress=False,
                max_length=64)  # the tiny model's limit
        out[n] = path
    return out


# --------------------------------------------------------------------------------------------


def same(a: dict, b: dict) -> bool:
    return json.dumps(a["scores"], sort_keys=True) == json.dumps(b["scores"], sort_keys=True)


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``benchmarks/compare.py`` compares them), each one larger when worse: peak MB
    above the baseline and seconds of every run."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    for part in ("conll", "train"):
        for name, r in results.get(part, {}).items():
            key = re.sub(r"[^a-z0-9]+", "_", f"{part} {name}".lower()).strip("_")
            out[f"{key}_peak_over_baseline_mb"] = r["peak_mb"] - r["baseline_mb"]
            out[f"{key}_s"] = r["seconds"]
    return out


def check(results: dict, quick: bool) -> list[str]:
    """What does not depend on timing: every run under a budget scores what the default run does; and (``--quick``,
    whose budget is below the features the probes read) the probes' peak under the budget is below their peak
    without one."""
    failed = []
    for name, r in results.get("conll", {}).items():  # the probes' scores are the same under any budget
        if r.get("same_scores_as_default") is False and name != "before":
            failed.append(f"conll {name}: other scores than without a budget")
    if quick and "conll" in results:
        runs = results["conll"]
        default, limited = runs["default"], next(r for k, r in runs.items() if k.startswith("--memory-budget"))
        if not limited["peak_mb"] - limited["baseline_mb"] < default["peak_mb"] - default["baseline_mb"]:
            failed.append(f"conll: the probes' peak under the budget ({limited['peak_mb'] - limited['baseline_mb']:.0f}"
                          f" MB above the baseline) is not below their peak without one "
                          f"({default['peak_mb'] - default['baseline_mb']:.0f} MB)")
    return failed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="the ner task's LinearProbes on 1,000 CoNLL sentences per file and train-head on 2,000 "
                        "examples, each without a budget and under 64MiB; asserts equal scores and a lower peak")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    p.add_argument("--only", choices=["conll", "train"], action="append")
    p.add_argument("--before", type=Path, default=None,
                   help="a checkout of layercache before the budget (git archive HEAD~N | tar -x -C DIR): measured too")
    p.add_argument("--budget", default=None, help="the probes' budget (default 1GB; --quick 64MiB)")
    p.add_argument("--train-budget", default=None, help="train-head's budget (default 256MiB; --quick 64MiB)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/memory.json, memory-quick.json with --quick)")
    p.add_argument("--conll-child", nargs=2, metavar=("CACHE", "BUDGET"))
    p.add_argument("--train-child", nargs=3, metavar=("CACHE", "BUDGET", "OUT"))
    p.add_argument("--linear-child", nargs=3, metavar=("CACHE", "BUDGET", "MAX_TRAIN"))
    args = p.parse_args()
    if args.conll_child or args.train_child or args.linear_child:
        code = os.environ.get("MEMORY_BENCH_CODE")
        if code:
            sys.path.insert(0, code)
        reset_peak()
        if args.conll_child:
            cache, budget = args.conll_child
            result = conll_child(cache, None if budget == "none" else int(budget))
        elif args.linear_child:
            cache, budget, max_train = args.linear_child
            result = linear_child(cache, None if budget == "none" else int(budget),
                                  None if max_train == "default" else int(max_train))
        else:
            cache, budget, out = args.train_child
            result = train_child(cache, None if budget == "none" else int(budget), out)
        print(json.dumps(result))
        return 0

    only = args.only or ["conll", "train"]
    os.environ["MEMORY_BENCH_THREADS"] = "auto" if args.quick else "2"  # read by the children
    budget_text = args.budget or (QUICK["budget"] if args.quick else "1GB")
    train_budget_text = args.train_budget or (QUICK["train_budget"] if args.quick else "256MiB")
    sizes = QUICK["train_sizes"] if args.quick else TRAIN_SIZES
    out_json = args.out or HERE / "results" / ("memory-quick.json" if args.quick else "memory.json")
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LAYERCACHE_HOME", str(args.cache_dir / "home"))
    started = time.perf_counter()
    results: dict = {"meta": {**machine_meta(args.quick, "minilm", "cpu"),
                              "before": str(args.before) if args.before else None, "budget": budget_text,
                              "train_budget": train_budget_text, "train_sizes": list(sizes)}}
    if "conll" in only:
        cache = conll_cache(args.data, args.cache_dir, QUICK["conll_limit"] if args.quick else None)
        budget = parse_size(budget_text)
        if args.quick:  # the linear probes alone, on a sample small enough to fit in seconds
            flag, extra, what = "--linear-child", [str(QUICK["probe_max_train"])], "LinearProbes of ner"
        else:
            flag, extra, what = "--conll-child", [], "probe-report's ner task"
        runs = {}
        if args.before:
            log(f"conll ({what}): before the budget")
            runs["before"] = run_child([flag, str(cache), "none", *extra], args.before)
        log(f"conll ({what}): no budget given (the default)")
        runs["default"] = run_child([flag, str(cache), "none", *extra], None)
        log(f"conll ({what}): --memory-budget {budget_text}")
        runs[f"--memory-budget {budget_text}"] = run_child([flag, str(cache), str(budget), *extra], None)
        ref = runs["default"]
        for r in runs.values():
            r["same_scores_as_default"] = same(r, ref)
        results["conll"] = runs
        eval_key = "probe_eval" if "probe_eval" in ref["scores"] else "test"
        _common.print_table(
            f"[1] CoNLL-2003 token probes ({what}: "
            + ("linear, control, prediction depth, MDL, cumulative" if not args.quick else
               f"{QUICK['probe_max_train']:,}-word sample, first {QUICK['conll_limit']:,} sentences per file")
            + "), MiniLM", ["run", "baseline MB", "peak MB", "peak - baseline", "seconds", "same scores"],
            [[k, r["baseline_mb"], r["peak_mb"], r["peak_mb"] - r["baseline_mb"], r["seconds"],
              r["same_scores_as_default"]] for k, r in runs.items()],
            note=f"training words fitted: {ref['n_train']:,} of {ref['n_train_available']:,}; "
                 f"eval accuracy by layer: {', '.join(f'{x:.3f}' for x in ref['scores'][eval_key])}")
    if "train" in only:
        caches = agnews_caches(args.data, args.cache_dir, sizes)
        budget = parse_size(train_budget_text)
        rows = []
        results["train"] = {}
        for n, cache in caches.items():
            ref = None
            for label, code, b in ((("before", args.before, "none"),) if args.before else ()) + (
                    ("default", None, "none"), (f"--memory-budget {train_budget_text}", None, str(budget))):
                log(f"train-head: {n:,} examples, {label}")
                r = run_child(["--train-child", str(cache), b, str(args.cache_dir / f"run-{n}")], code)
                ref = r if label == "default" else ref
                if ref is not None:
                    r["same_scores_as_default"] = same(r, ref)
                results["train"][f"{n}/{label}"] = r
                rows.append([f"{n:,} examples, {label}", r["tokens"], r["baseline_mb"], r["peak_mb"],
                             r["peak_mb"] - r["baseline_mb"], r["seconds"], r.get("same_scores_as_default")])
        _common.print_table("[2] train-head --mixer scalar, one epoch, tiny BERT token states (3 x 32)",
                            ["run", "tokens", "baseline MB", "peak MB", "peak - baseline", "seconds",
                             "same validation metrics"], rows,
                            note="Not asserted: a feed's blocks, the unit its epochs shuffle by, are sized by the "
                                 "budget, so a budget may train on another order of the rows.")
    results["meta"]["total_s"] = time.perf_counter() - started
    results["meta"]["loadavg_end"] = loadavg()
    results["figures"] = figures(results)
    results["checks_failed"] = check(results, args.quick)
    write_results(results, out_json)
    if results["checks_failed"]:
        print("\nFAILED:\n  " + "\n  ".join(results["checks_failed"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
