"""Peak memory under ``--memory-budget`` (issue 28): probes and train-head on caches larger than the budget.

Each measurement runs in a fresh interpreter and reads its own peak resident memory (``VmHWM``) twice:
after the imports and the opened cache (the baseline), and after the work. ``--code DIR`` runs a
measurement with another checkout of layercache (e.g. ``git archive HEAD`` unpacked into a folder), so
the code before the budget is measured on the same machine, the same caches and the same seeds.

1. conll - the CoNLL-2003 token probes of ``probe-report`` (linear probes and their prediction depth,
   the control task, MDL and cumulative scoring of the ``ner`` task, the report's defaults: a seeded
   sample of 4,000 training words, a seeded 10 % of the train sentences validating, scores on the
   held-out split) on a MiniLM cache of the whole train file (~204k words, 7 states x 384) and
   ``valid.txt`` as the held-out split: peak RSS without a budget and with ``--memory-budget 1GB``,
   and whether every score is the same. The cache is extracted into ``--cache-dir`` when missing
   (``layercache extract minilm --split train=.../train.txt --split test=.../valid.txt``).
2. train - ``train-head`` (``--mixer scalar``, one epoch) on token states of 10k and 100k examples
   (AG News texts repeated to 100k rows, through the tiny random BERT of ``tests/tiny_models.py``: 3 states
   x 32, so the cache, not the model, is what grows): peak RSS by size, with and without a budget.

Prints tables and writes JSON (default ``benchmarks/results/memory.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from _common import DEFAULT_DATA, HERE, REPO, loadavg, write_results  # noqa: E402

DEFAULT_CACHE_DIR = Path("/tmp/mem-bench")
TRAIN_SIZES = (10_000, 100_000)


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


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


def budgeted(budget: int | None):
    """The work under ``--memory-budget budget``, or as the library runs it by default (None)."""
    from contextlib import nullcontext

    from layercache.core.memory import memory_limit

    return nullcontext() if budget is None else memory_limit(budget)


def conll_child(cache_path: str, budget: int | None) -> dict:
    import numpy as np

    from layercache import LayerCache
    from layercache.core.threads import use_threads  # kept by every computing call, even at torch's default count
    from layercache.report.probing import build_probe_report

    use_threads(2)
    with LayerCache.open(cache_path) as cache:
        cache.lengths("train")
        baseline = peak_rss_mb()
        t0 = time.perf_counter()
        with budgeted(budget):
            report = build_probe_report(cache, tasks=["ner"], seed=0)
        seconds = time.perf_counter() - t0
    task = report.tasks["ner"]

    def floats(x):
        return None if x is None else [float(v) for v in np.asarray(x, np.float64).ravel()]

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


def linear_child(cache_path: str, budget: int | None) -> dict:
    """The linear probes of the ner task alone (fit with the defaults, scored on the held-out split)."""
    from layercache import LayerCache
    from layercache.core.threads import use_threads  # kept by every computing call, even at torch's default count
    from layercache.probes import LinearProbes

    use_threads(2)
    with LayerCache.open(cache_path) as cache:
        cache.lengths("train")
        baseline = peak_rss_mb()
        t0 = time.perf_counter()
        with budgeted(budget):
            probes = LinearProbes(task="ner", seed=0).fit(cache)
            test = probes.score(cache, "test")
        seconds = time.perf_counter() - t0
    scores = {"validation": [float(x) for x in probes.scores_], "test": [float(x) for x in test],
              "C": [float(x) for x in probes.C_], "grid_losses": probes.grid_losses_.ravel().tolist()}
    return {"baseline_mb": baseline, "peak_mb": peak_rss_mb(), "seconds": seconds, "scores": scores,
            "n_train": int(probes.n_train_), "n_train_available": int(probes.n_train_available_),
            "n_val": int(probes.n_val_), "loadavg": loadavg()}


def train_child(cache_path: str, budget: int | None, out: str) -> dict:
    from layercache import LayerCache
    from layercache.core.threads import use_threads  # kept by every computing call, even at torch's default count
    from layercache.heads.workflow import train_head

    use_threads(2)
    with LayerCache.open(cache_path) as cache:
        n = cache.num_examples("train")
        tokens = int(cache.lengths("train").sum())
        baseline = peak_rss_mb()
        t0 = time.perf_counter()
        kwargs = {} if budget is None else {"memory_budget": budget}
        result = train_head(cache, "scalar", out=out, overwrite=True, epochs=1, progress=False, source="tokens",
                            **kwargs)
        seconds = time.perf_counter() - t0
    metrics = result.metrics if hasattr(result, "metrics") else None
    return {"examples": n, "tokens": tokens, "baseline_mb": baseline, "peak_mb": peak_rss_mb(), "seconds": seconds,
            "metrics": str(metrics)[:300], "loadavg": loadavg()}


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


def conll_cache(data: Path, cache_dir: Path) -> Path:
    from layercache import extract

    path = cache_dir / "conll"
    extract("minilm", None, path, split_files={"train": str(data / "conll2003/train.txt"),
                                               "test": str(data / "conll2003/valid.txt")},
            device="cpu", progress=False)
    return path


def agnews_caches(data: Path, cache_dir: Path) -> dict[int, Path]:
    """Tiny-BERT caches of the AG News dev texts repeated to 100k rows, and of their first 10k."""
    from layercache import extract

    sys.path.insert(0, str(REPO / "tests"))
    from tiny_models import make_model

    model = cache_dir / "tiny-bert"
    if not (model / "config.json").is_file():
        make_model(model, "bert")
    rows = (data / "agnews/dev.tsv").read_text(encoding="utf-8").splitlines()
    rows = [r for r in rows if "\t" in r]
    big = cache_dir / "agnews-100k.tsv"
    if not big.is_file():
        big.write_text("\n".join((rows * (TRAIN_SIZES[-1] // len(rows) + 1))[:TRAIN_SIZES[-1]]) + "\n",
                       encoding="utf-8")
    out = {}
    for n in TRAIN_SIZES:
        path = cache_dir / f"agnews-tiny-{n // 1000}k"
        extract(str(model), None, path, split_files={"train": str(big)}, limit=n, device="cpu", progress=False,
                max_length=64)  # the tiny model's limit
        out[n] = path
    return out


# --------------------------------------------------------------------------------------------


def same(a: dict, b: dict) -> bool:
    return json.dumps(a["scores"], sort_keys=True) == json.dumps(b["scores"], sort_keys=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    p.add_argument("--only", choices=["conll", "train"], action="append")
    p.add_argument("--before", type=Path, default=None,
                   help="a checkout of layercache before the budget (git archive HEAD~N | tar -x -C DIR): measured too")
    p.add_argument("--budget", default="1GB", help="the probes' budget (default 1GB)")
    p.add_argument("--train-budget", default="256MiB", help="train-head's budget (default 256MiB)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "memory.json")
    p.add_argument("--conll-child", nargs=2, metavar=("CACHE", "BUDGET"))
    p.add_argument("--train-child", nargs=3, metavar=("CACHE", "BUDGET", "OUT"))
    p.add_argument("--linear-child", nargs=2, metavar=("CACHE", "BUDGET"))
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
            cache, budget = args.linear_child
            result = linear_child(cache, None if budget == "none" else int(budget))
        else:
            cache, budget, out = args.train_child
            result = train_child(cache, None if budget == "none" else int(budget), out)
        print(json.dumps(result))
        return

    from layercache.cli.parsing import parse_size

    only = args.only or ["conll", "train"]
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LAYERCACHE_HOME", str(args.cache_dir / "home"))
    started = time.perf_counter()
    results: dict = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu_count": os.cpu_count(),
                              "loadavg_start": loadavg(), "before": str(args.before) if args.before else None}}
    if "conll" in only:
        cache = conll_cache(args.data, args.cache_dir)
        budget = parse_size(args.budget)
        runs = {}
        if args.before:
            log("conll: before the budget")
            runs["before"] = run_child(["--conll-child", str(cache), "none"], args.before)
        log("conll: no budget given (the default)")
        runs["default"] = run_child(["--conll-child", str(cache), "none"], None)
        log(f"conll: --memory-budget {args.budget}")
        runs[args.budget] = run_child(["--conll-child", str(cache), str(budget)], None)
        ref = runs["default"]
        for r in runs.values():
            r["same_scores_as_default"] = same(r, ref)
        results["conll"] = runs
        _common.print_table(
            "[1] CoNLL-2003 token probes of probe-report (ner: linear, control, prediction depth, MDL, cumulative), "
            "MiniLM", ["run", "baseline MB", "peak MB", "peak - baseline", "seconds", "same scores"],
            [[k, r["baseline_mb"], r["peak_mb"], r["peak_mb"] - r["baseline_mb"], r["seconds"],
              r["same_scores_as_default"]] for k, r in runs.items()],
            note=f"training words fitted: {ref['n_train']:,} of {ref['n_train_available']:,}; "
                 f"eval accuracy by layer: {', '.join(f'{x:.3f}' for x in ref['scores']['probe_eval'])}")
    if "train" in only:
        caches = agnews_caches(args.data, args.cache_dir)
        budget = parse_size(args.train_budget)
        rows = []
        results["train"] = {}
        for n, cache in caches.items():
            for label, code, b in ((("before", args.before, "none"),) if args.before else ()) + (
                    ("default", None, "none"), (f"--memory-budget {args.train_budget}", None, str(budget))):
                log(f"train-head: {n:,} examples, {label}")
                r = run_child(["--train-child", str(cache), b, str(args.cache_dir / f"run-{n}")], code)
                results["train"][f"{n}/{label}"] = r
                rows.append([f"{n:,} examples, {label}", r["tokens"], r["baseline_mb"], r["peak_mb"],
                             r["peak_mb"] - r["baseline_mb"], r["seconds"]])
        _common.print_table("[2] train-head --mixer scalar, one epoch, tiny BERT token states (3 x 32)",
                            ["run", "tokens", "baseline MB", "peak MB", "peak - baseline", "seconds"], rows)
    results["meta"]["total_s"] = time.perf_counter() - started
    results["meta"]["loadavg_end"] = loadavg()
    write_results(results, args.out)


if __name__ == "__main__":
    main()
