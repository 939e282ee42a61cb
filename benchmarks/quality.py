"""Head quality on tasks nobody tuned for: layercache's heads against scikit-learn's best single layer.

For each task (all-MiniLM-L6-v2 caches of ``../shared/data``; the held-out file is the ``test``
split, which never selects anything; validation is one seeded stratified 10 % slice of train,
the same rows for every model):

1. ``sklearn best layer``: ``StandardScaler`` + ``LogisticRegression`` (lbfgs) on one layer's
   mean-pooled vector, the layer and ``C`` (the heads' grid, 0.001-10) chosen together on the
   validation slice by the task's selection metric: the baseline every user runs first;
2. ``layer:i (val)``: layercache's ``layer:<i>`` head (the convex fit) with ``i`` chosen on the
   same slice;
3. every mixer at its defaults (``last``, ``scalar``, ``adaptive``, ``attention``, ``gumbel``,
   ``act``), 3 seeds each: test mean ± sd, and any collapse warning (one sweep without a budget
   or grid runs them, so every run validates on the same rows); also ``adaptive`` with its three
   seeds averaged as one model (what ``train-head --seeds 3`` trains);
4. the pick of ``layercache sweep --budget B`` (the full candidate grid, 3 seeds; by default the
   winner's seeds averaged; a grid variant only where it beat its mixer's default in 95 % of paired
   bootstrap resamples of the validation slice), its time, and the leader it passed over if any.

The metric is each task's default selection metric (Matthews correlation for the imbalanced MPQA
and CR, accuracy for SST-2). Targets (issue 17): on every task the default ``adaptive`` head beats
scikit-learn's best layer by more than its seed spread, no head collapses to one class, and on
SST-2 the 320 s sweep ends inside its budget and its pick scores at least as well on the held-out
split as the default ``adaptive`` head (the mean of its seeds; the 3-seed average is reported beside it).

    python benchmarks/quality.py                               # sst2, mpqa, cr: about 30 minutes
    python benchmarks/quality.py --tasks cr --budget 60s       # one small task, a few minutes
    python benchmarks/quality.py --quick                       # a smoke run with checks, about a minute

``--quick``: SST-2's first 500 sentences of each file, the mixers ``last``, ``layer``, ``scalar`` and
``adaptive`` at 5 epochs, one seed, a 15 s sweep; it asserts what does not depend on timing: the span F1
below scores hand-made sentences as conlleval does, the validation slice and the training part cover the
training split, and scikit-learn's best layer and the ``adaptive`` head beat the majority class on the
held-out split.

``--tasks conll`` adds CoNLL-2003 NER (entity F1; about 28 minutes more): its linear baseline is
:class:`~layercache.probes.LinearProbes` (see :func:`probe_best_layer_tokens`); ``layer:i`` is the
convex fit there too, on each word's first sub-token. Prints a table per task and writes JSON
(default ``benchmarks/results/quality.json``, ``quality-quick.json`` with ``--quick``) with the headline
``figures`` (seconds). Public API only: the validation slice is :func:`layercache.heads.validation_slice`
(the one every head and probe of a task and seed holds out), the metric
:func:`layercache.heads.default_metric`, the heads' C grid what a fitted convex ``LayerHead`` records
(``fit_["C_grid"]``); the entity F1 of the probes' word predictions is computed here (:func:`span_f1`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, print_table, write_results  # noqa: E402

DATASETS = {  # name -> (train file, held-out file)
    "sst2": ("sst2/train.tsv", "sst2/dev.tsv"),
    "mpqa": ("mpqa/train.tsv", "mpqa/dev.tsv"),
    "cr": ("cr/train.tsv", "cr/dev.tsv"),
    "conll": ("conll2003/train.txt", "conll2003/valid.txt"),
}
TASK = {"conll": "ner"}  # the task probed where a cache holds several
SEEDS = (0, 1, 2)
QUICK = {"tasks": ["sst2"], "limit": 500, "mixers": ["last", "layer", "scalar", "adaptive"], "epochs": 5, "seeds": 1,
         "budget": "15s"}


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


def get_cache(name: str, data: Path, cache_dir: Path, limit: int | None = None) -> Path:
    """The MiniLM cache of one dataset (extracted when missing; the names and options probes.py and heads.py use)."""
    from layercache import extract

    train, held_out = DATASETS[name]
    path = cache_dir / f"{name}-{limit or 'all'}"
    extract("minilm", None, path, split_files={"train": str(data / train), "test": str(data / held_out)},
            limit=limit, device="cpu", progress=False)
    return path


def entity_spans(tags: list[str]) -> set[tuple[str, int, int]]:
    """The entities of one sentence's IOB tags as ``(type, start, end)``, read as conlleval reads IOB1 and IOB2: an
    ``I-`` after ``O`` or after another type starts an entity, ``B-`` always does."""
    spans, start, kind = set(), None, None
    for i, tag in enumerate([*tags, "O"]):  # the sentinel closes the last entity
        prefix, _, label = tag.partition("-")
        begins = prefix == "B" or (prefix == "I" and label != kind)
        if kind is not None and (prefix == "O" or begins):
            spans.add((kind, start, i))
            kind = None
        if begins:
            start, kind = i, label
    return spans


def span_f1(gold: list[list[str]], predicted: list[list[str]]) -> float:
    """Entity-level micro F1 over sentences (conlleval): an entity counts when its type, start and end all match."""
    true = {(n, *span) for n, tags in enumerate(gold) for span in entity_spans(tags)}
    pred = {(n, *span) for n, tags in enumerate(predicted) for span in entity_spans(tags)}
    correct = len(true & pred)
    precision = correct / len(pred) if pred else 0.0
    recall = correct / len(true) if true else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def span_f1_self_test() -> list[str]:
    """Hand-made sentences with known entity F1 (conlleval's reading), or what :func:`span_f1` got wrong."""
    cases = [
        ([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "I-LOC"]], 1.0),  # I- after O starts one
        ([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "O", "O", "B-LOC"]], 0.5),  # a span cut short is wrong
        ([["B-ORG", "I-ORG"], ["O", "B-MISC"]], [["B-ORG", "I-LOC"], ["O", "O"]], 0.0),  # a type change splits
        ([["B-PER", "B-PER"]], [["B-PER", "I-PER"]], 0.0),  # B- always starts a new entity
        ([["O", "O"]], [["O", "O"]], 0.0),
    ]
    return [f"span_f1({g}, {p}) = {span_f1(g, p)}, not {want}" for g, p, want in cases
            if abs(span_f1(g, p) - want) > 1e-12]


def heads_c_grid(cache, task) -> tuple[float, ...]:
    """The C grid the heads' convex fit tries (``layer:<i>`` / ``last``): what a fitted one records."""
    from layercache import LayerHead

    head = LayerHead("last", tasks=[task.name], solver="lbfgs", progress=False, device="cpu").fit(cache)
    return tuple(float(c) for c in head.fit_["C_grid"])


def sklearn_best_layer(cache, task, metric: str, val_rows, train_rows, C_grid) -> dict:
    """Layer and C of scikit-learn's LogisticRegression chosen on the validation rows; its test scores."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    score = {"accuracy": accuracy_score, "mcc": matthews_corrcoef,
             "macro_f1": lambda a, b: f1_score(a, b, average="macro")}[metric]
    t0 = time.perf_counter()
    X, y = cache.pooled("train", "mean"), cache.labels("train", task.name)
    X_test, y_test = cache.pooled("test", "mean"), cache.labels("test", task.name)
    best = None
    for layer in range(X.shape[1]):
        for C in C_grid:
            model = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model.fit(X[train_rows, layer], y[train_rows])
            val = score(y[val_rows], model.predict(X[val_rows, layer]))
            if best is None or val > best["validation"]:
                predicted = model.predict(X_test[:, layer])
                best = {"layer": layer, "C": C, "validation": val, "test": score(y_test, predicted),
                        "test_accuracy": accuracy_score(y_test, predicted)}
    return {**best, "seconds": time.perf_counter() - t0}


def probe_best_layer_tokens(cache, task) -> dict:
    """A token task's linear baseline: :class:`~layercache.probes.LinearProbes` on each layer's word states.

    Per word, scikit-learn's ``LogisticRegression`` on ~200k CoNLL words x 7 layers x a C grid would
    take about an hour here; ``LinearProbes`` fits the same model (``benchmarks/probes.py``: within
    0.11 point of scikit-learn on SST-2), all layers at once. C per layer and then the layer are
    chosen by accuracy on the probes' own seeded 10 % of the training sentences; the held-out split
    is scored by entity F1. The grid leaves out C = 10, which never won on CoNLL and needs most of
    the L-BFGS iterations.
    """
    import numpy as np

    from layercache.probes import LinearProbes

    t0 = time.perf_counter()
    probes = LinearProbes(task=task.name, C_grid=(0.01, 0.1, 1.0)).fit(cache)
    predicted, gold = probes.predictions(cache, "test")  # (L, words), (words,)
    counts = [int((np.asarray(s) >= 0).sum()) for s in cache.labels("test", task.name)]
    if sum(counts) != len(gold):
        raise RuntimeError("the probes left words out (truncation?); span F1 needs every word")
    bounds = np.cumsum([0, *counts])

    def sentences(tags) -> list[list[str]]:
        return [[task.label_names[i] for i in tags[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]

    layer = probes.best_layer_
    test = span_f1(sentences(gold), sentences(predicted[layer]))
    return {"layer": layer, "C": float(probes.C_[layer]), "validation_accuracy": float(probes.scores_[layer]),
            "test": test, "test_accuracy": float((predicted[layer] == gold).mean()),
            "seconds": time.perf_counter() - t0}


def row(name: str, test: list[float], seconds: float, note: str = "") -> dict:
    return {"model": name, "test_mean": statistics.fmean(test), "test_sd": statistics.stdev(test) if len(test) > 1
            else None, "runs": test, "seconds": seconds, "note": note}


def bench_task(name: str, cache_path: Path, budget: str, seeds: int, runs_dir: Path, mixers: list[str] | None = None,
               params: dict | None = None) -> dict:
    import numpy as np

    from layercache import LayerCache, sweep
    from layercache.heads import default_metric, validation_slice

    params = params or {}
    with LayerCache.open(cache_path) as cache:
        task = next(t for t in cache.tasks if t.name == TASK.get(name, t.name))
        y = cache.labels("train", task.name)
        counts = None if task.kind != "sequence" else np.bincount(y, minlength=task.num_classes)
        metric, why = default_metric(task, counts)
        train_rows, val_rows = validation_slice(cache, "train", [task], 0.1, 0)  # the sweeps' slice (seed 0)
        result = {"task": task.name, "metric": metric, "metric_reason": why, "n_train": int(len(train_rows)),
                  "n_validation": int(len(val_rows)), "n_test": cache.num_examples("test"), "rows": []}
        log(f"{name}: {task.name} ({metric}, {why})")
        result["n_train_split"] = cache.num_examples("train")
        if task.kind == "sequence":
            y_test = np.asarray(cache.labels("test", task.name))
            result["test_majority_share"] = float(np.bincount(y_test).max() / len(y_test))
            result["heads_C_grid"] = heads_c_grid(cache, task)
            sk = sklearn_best_layer(cache, task, metric, val_rows, train_rows, result["heads_C_grid"])
            result["sklearn"] = sk
            result["rows"].append(row("sklearn best layer", [sk["test"]], sk["seconds"],
                                      f"layer {sk['layer']}, C={sk['C']:g}"))
            log(f"scikit-learn best layer: {cache.layer_names[sk['layer']]}, test {sk['test']:.4f}")
        else:
            sk = probe_best_layer_tokens(cache, task)
            result["sklearn"] = sk
            result["rows"].append(row("linear probe best layer", [sk["test"]], sk["seconds"],
                                      f"layer {sk['layer']}, C={sk['C']:g} (LinearProbes = scikit-learn's LR)"))
            log(f"linear probe best layer: {cache.layer_names[sk['layer']]}, test {sk['test']:.4f}")
        with LayerCache.open(cache_path) as handle:
            t0 = time.perf_counter()
            plain = sweep(handle, budget=None, grid=False, tasks=[task.name], seeds=seeds, progress=False,
                          out=runs_dir / f"{name}-mixers", overwrite=True, mixers=mixers, **params)
            result["mixers_sweep_s"] = time.perf_counter() - t0
        layers = [c for c in plain.leaderboard if c.candidate.startswith("layer:") or c.candidate == "last"]
        picked = max(layers, key=lambda c: c.validation_mean)
        result["rows"].append(row("layer:i (val)", picked.test, picked.seconds, picked.candidate))
        for c in plain.leaderboard:
            if c.candidate.startswith("layer:"):
                continue
            result["rows"].append(row(c.candidate, c.test, c.seconds, "; ".join(c.warnings)))
            log(f"{c.candidate}: test {c.test_mean:.4f} +- {c.test_sd or 0:.4f} ({c.seconds:.0f} s)")
            if c.candidate == "adaptive" and c.averaged:
                result["rows"].append(row(f"adaptive, {len(c.seeds)} seeds averaged", [c.averaged["test"]], c.seconds,
                                          "train-head --seeds 3"))
        result["mixer_leaderboard"] = [c.to_json() for c in plain.leaderboard]
        t0 = time.perf_counter()
        with LayerCache.open(cache_path) as handle:
            swept = sweep(handle, budget=budget, tasks=[task.name], seeds=seeds, progress=False,
                          out=runs_dir / f"{name}-sweep", overwrite=True, mixers=mixers, **params)
        wall = time.perf_counter() - t0
        pick = swept.pick
        kept = "seeds " + ", ".join(map(str, pick["seeds"])) + (" averaged" if pick["kind"] == "seeds" else "")
        leader = swept.leader
        result["sweep"] = {"budget_s": swept.budget, "elapsed_s": swept.elapsed, "wall_s": wall, "pick": pick,
                           "winner": swept.winner.to_json(), "leader": leader.to_json(),
                           "leaderboard": [c.to_json() for c in swept.leaderboard],
                           "candidates_run": len(swept.leaderboard), "skipped": len(swept.skipped)}
        doubted = ""
        if leader is not swept.winner:  # a variant led by no more than noise: its default is kept
            lead = leader.versus_default
            doubted = (f"; leader {leader.candidate} ({lead['difference']:+.4f} over {lead['default']}, won "
                       f"{lead['p_better']:.0%} of resamples) gave way")
        result["rows"].append(row(f"sweep {budget} pick", [pick["test"]], wall,
                                  f"{pick['candidate']}, {kept}; {len(swept.leaderboard)} candidates{doubted}"))
        log(f"sweep {budget}: {pick['candidate']} ({kept}), test {pick['test']:.4f}, {swept.elapsed:.0f} s")
        adaptive = next(r for r in result["rows"] if r["model"] == "adaptive")
        checks = {"no_collapse": not any(c.warnings for c in plain.leaderboard),
                  "sweep_inside_budget": swept.elapsed <= swept.budget,
                  "sweep_pick_at_least_adaptive": pick["test"] >= adaptive["test_mean"]}
        if "sklearn" in result:
            margin = adaptive["test_mean"] - result["sklearn"]["test"]
            checks["adaptive_beats_sklearn_by_more_than_sd"] = margin > (adaptive["test_sd"] or 0.0)
            result["adaptive_margin"] = margin
        result["checks"] = checks
        return result


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``benchmarks/compare.py`` compares them): seconds, larger when worse."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    for name, r in results["tasks"].items():
        out[f"{name}_linear_baseline_s"] = r["sklearn"]["seconds"]
        out[f"{name}_mixers_sweep_s"] = r["mixers_sweep_s"]
        out[f"{name}_budget_sweep_s"] = r["sweep"]["wall_s"]
        for row in r["rows"]:
            if row["model"] == "adaptive":
                out[f"{name}_adaptive_s"] = row["seconds"]
    return out


def quick_checks(results: dict) -> list[str]:
    """What a quick run must show whatever the machine's speed."""
    failed = span_f1_self_test()
    for name, r in results["tasks"].items():
        if r["n_train"] + r["n_validation"] != r["n_train_split"]:
            failed.append(f"{name}: the training part ({r['n_train']}) and the validation slice ({r['n_validation']}) "
                          f"do not cover the {r['n_train_split']} training examples")
        if "test_majority_share" not in r:
            continue
        floor = r["test_majority_share"]
        accuracy = {"scikit-learn's best layer": r["sklearn"]["test_accuracy"]}
        adaptive = next(c for c in r["mixer_leaderboard"] if c["candidate"] == "adaptive")
        if r["metric"] == "accuracy":
            accuracy["adaptive"] = min(adaptive["test"]["runs"])
        for what, value in accuracy.items():
            if not value > floor:
                failed.append(f"{name}: {what} scores {value:.4f} on the held-out split, not above the majority "
                              f"class's share {floor:.4f}")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{', '.join(QUICK['tasks'])}: first {QUICK['limit']} examples of each file, mixers "
                             f"{', '.join(QUICK['mixers'])} at {QUICK['epochs']} epochs, {QUICK['seeds']} seed, a "
                             f"{QUICK['budget']} sweep; asserts what does not depend on timing")
    parser.add_argument("--tasks", nargs="+", default=None, choices=list(DATASETS),
                        help="default sst2 mpqa cr (--quick sst2)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/lc-bench-caches"))
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="the sweeps' run folders (default /tmp/lc-quality; --quick a temporary folder)")
    parser.add_argument("--budget", default=None, help="the sweep's budget per task (default 320s; --quick 15s)")
    parser.add_argument("--seeds", type=int, default=None, help=f"default {len(SEEDS)} (--quick 1)")
    parser.add_argument("--threads", default=None,
                        help="torch threads, or auto (the idle cores; default 2, --quick auto: timing is not judged "
                             "there, and 2 threads beside a busy process run many times slower)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON output (default: benchmarks/results/quality.json, quality-quick.json with --quick)")
    args = parser.parse_args()
    if not args.data.is_dir():
        sys.exit(f"no data folder at {args.data}; pass --data")
    from layercache import use_threads  # kept by every computing call, even at torch's default count

    threads = args.threads or ("auto" if args.quick else "2")
    use_threads(None if threads == "auto" else int(threads))
    tasks = args.tasks or (QUICK["tasks"] if args.quick else ["sst2", "mpqa", "cr"])
    budget = args.budget or (QUICK["budget"] if args.quick else "320s")
    seeds = args.seeds or (QUICK["seeds"] if args.quick else len(SEEDS))
    limit = QUICK["limit"] if args.quick else None
    mixers = QUICK["mixers"] if args.quick else None
    params = {"epochs": QUICK["epochs"], "device": "cpu"} if args.quick else {}
    out = args.out or HERE / "results" / ("quality-quick.json" if args.quick else "quality.json")
    started = time.perf_counter()
    results = {"meta": {**machine_meta(args.quick, "minilm", "cpu"), "threads": threads, "limit": limit,
                        "mixers": mixers or "all", "params": params, "seeds": seeds},
               "budget": budget, "tasks": {}}
    with tempfile.TemporaryDirectory(prefix="lc-quality-") as scratch:
        runs_dir = args.runs_dir or (Path(scratch) if args.quick else Path("/tmp/lc-quality"))
        for name in tasks:
            path = get_cache(name, args.data, args.cache_dir, limit)
            results["tasks"][name] = bench_task(name, path, budget, seeds, runs_dir, mixers, params)
    for name, r in results["tasks"].items():
        rows = [[x["model"], f"{x['test_mean']:.4f}" + (f" ± {x['test_sd']:.4f}" if x["test_sd"] is not None else ""),
                 f"{x['seconds']:.1f}", x["note"]] for x in r["rows"]]
        print_table(f"{name}: {r['task']}, test {r['metric']} ({r['metric_reason']}); train {r['n_train']:,}, "
                    f"validation {r['n_validation']:,}, test {r['n_test']:,}",
                    ["model", f"test {r['metric']} (mean ± sd over seeds)", "seconds", "note"], rows,
                    note="checks: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in r["checks"].items())
                         + (" (not judged on a quick run)" if args.quick else ""))
    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["total_s"] = time.perf_counter() - started
    results["figures"] = figures(results)
    results["checks_failed"] = quick_checks(results) if args.quick else span_f1_self_test()
    write_results(results, out)
    if results["checks_failed"]:
        print("\nFAILED:\n  " + "\n  ".join(results["checks_failed"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
