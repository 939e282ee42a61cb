"""What smaller storage costs in quality: fp16 against int8 (and int8 + projection to K dimensions).

For each task (all-MiniLM-L6-v2 caches of ``../shared/data``, train + the held-out file as the
``test`` split, which never selects anything; validation is a seeded slice of train, the same rows
for every storage variant), one cache per storage variant:

- ``fp16``: ``--storage-dtype float16``; ``int8``: ``--storage-dtype int8`` (one float32 scale per
  token and state); ``int8+pK``: int8 with the states projected to ``K`` dimensions
  (``extract(..., project=K)``), run only when the installed layercache has that option; otherwise
  the rows say "not built".
- cache size on disk (every file of the cache folder) and the ratio to fp16; extraction wall time
  (the whole ``extract()`` call, model load included, its quality check of a lossy cache off:
  ``quality_examples=0``, which ``benchmarks/plan_check_cost.py`` times) and its ratio to fp16, the
  variants extracted back to back in this process (``--extract-reps 2`` runs them ABBA and keeps the
  medians).
- per state: :class:`~layercache.probes.LinearProbes` (``C`` chosen per state on the probes' seeded
  10 % slice of train) scored on the held-out split by the task's metric (accuracy for SST-2,
  Matthews correlation for the imbalanced CR and MPQA, entity F1 for CoNLL-2003 NER, on each word's
  first sub-token).
- the default ``adaptive`` head (``LayerHead(mixer="adaptive")``), ``--seeds`` seeds (default 3)
  sharing one validation slice (``val_seed=0``, as ``layercache sweep`` does): held-out mean, sd and
  spread (max - min).
- for the sentence tasks, the same head on the pooled means only (``source="pooled:mean"``, today's
  fallback for a pooled-only cache) against token states, on the fp16 cache (and int8 with
  ``--pooled-all``).

Targets (issue 28): int8 within 0.3 point of fp16 on every state's probe and, for the head, inside
the fp16 head's seed spread; the smallest K where the head loses under 1 point.

    python benchmarks/storage_quality.py --quick                                        # smoke run with checks
    python benchmarks/storage_quality.py --tasks cr --limit 500 --seeds 1 --epochs 2   # a small run
    python benchmarks/storage_quality.py --tasks cr mpqa conll                          # fp16 and int8
    python benchmarks/storage_quality.py --tasks sst2 --extract-reps 2                  # end to end

Caches go to ``--cache-dir`` (default ``/tmp/quality``), one folder per task and variant; an
existing complete cache is reused (its extraction time then comes from the side file written when
it was made). Prints a table per task and writes JSON (default
``benchmarks/results/storage_quality.json``, ``storage_quality-quick.json`` with ``--quick``) with the
headline ``figures`` (seconds, MB, size over fp16).

``--quick`` (about a minute once its caches exist): the first 300 SST-2 sentences of each file, fp16 and int8,
probes, one seed of the head at 5 epochs, no pooled head; it asserts what does not depend on timing: int8 takes
under 0.75x fp16's bytes, every state's probe on int8 lies within 2 points of fp16's, and the fp16 head beats the
majority class. Public API only (the task's metric from :func:`layercache.heads.default_metric`, the entity
F1 from ``benchmarks/quality.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_DATA,
    HERE,
    loadavg,
    machine_meta,
    print_table,
    quiet_transformers,
    write_results,  # noqa: E402
)

DATASETS = {  # name -> (train file, held-out file)
    "sst2": ("sst2/train.tsv", "sst2/dev.tsv"),
    "cr": ("cr/train.tsv", "cr/dev.tsv"),
    "mpqa": ("mpqa/train.tsv", "mpqa/dev.tsv"),
    "conll": ("conll2003/train.txt", "conll2003/valid.txt"),
    "agnews": ("agnews/dev.tsv", "agnews/test.tsv"),
}
TASK = {"conll": "ner"}  # the task probed where a cache holds several
HELD_OUT = "test"
NOT_BUILT = "not built"


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


# --------------------------------------------------------------------------------------------
# extraction


def projection_support() -> str | None:
    """How this layercache takes a projection width: ``"kwarg"`` (``extract(project=K)``),
    ``"spec"`` (``StorageSpec(project=K)``), or None where it is not built yet."""
    from layercache import extract
    from layercache.extraction import StorageSpec

    if "project" in inspect.signature(extract).parameters:
        return "kwarg"
    if "project" in {f.name for f in dataclasses.fields(StorageSpec)}:
        return "spec"
    return None


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def extract_variant(model: str, name: str, variant: dict, data: Path, cache_dir: Path, limit: int | None,
                    fresh: bool) -> dict:
    """Extract (or reuse) the cache of one task and storage variant; its size and extraction time."""
    from layercache import CacheError, extract

    train, held_out = DATASETS[name]
    files = {"train": str(data / train), HELD_OUT: str(data / held_out)}
    path = cache_dir / f"{model}-{name}-{limit or 'all'}-{variant['name']}"
    side = path.with_suffix(".extract-time.json")
    # extract()'s quality check of a lossy cache is off: it is not storage (benchmarks/plan_check_cost.py times it)
    kwargs = {"split_files": files, "limit": limit, "progress": False, "overwrite": fresh, "quality_examples": 0}
    if variant["project"]:
        how = projection_support()
        if how is None:
            return {"path": str(path), "status": NOT_BUILT}
        if how == "kwarg":
            kwargs.update(storage_dtype=variant["dtype"], project=variant["project"])
        else:
            from layercache.extraction import StorageSpec

            kwargs["storage"] = StorageSpec(storage_dtype=variant["dtype"], project=variant["project"])
    else:
        kwargs["storage_dtype"] = variant["dtype"]
    t0 = time.perf_counter()
    try:
        try:
            result = extract(model, None, path, **kwargs)
        except CacheError:  # a folder left by an interrupted or refused run: start it afresh
            if not path.exists() or fresh:
                raise
            log(f"    {path.name}: not a complete cache of this configuration; extracting afresh")
            t0 = time.perf_counter()
            result = extract(model, None, path, **{**kwargs, "overwrite": True})
    except Exception as error:  # noqa: BLE001 - a projection still being built: its rows say so
        if not variant["project"]:
            raise
        return {"path": str(path), "status": f"{NOT_BUILT} ({type(error).__name__}: {str(error)[:120]})"}
    seconds = time.perf_counter() - t0
    if result.already_complete:
        timing = {**(json.loads(side.read_text()) if side.is_file() else {}), "reused": True}
    else:
        timing = {"extract_s": seconds, "reused": False, "loadavg": loadavg()}
        side.write_text(json.dumps(timing, indent=2) + "\n")
    from layercache import LayerCache

    with LayerCache.open(path) as cache:
        tokens = {s: int(cache.lengths(s).sum()) for s in cache.splits}
        width = int(cache.hidden_size)
        states = len(cache.layer_names)
    return {"path": str(path), "status": "ok", "bytes": folder_bytes(path), "tokens": tokens, "width": width,
            "states": states, **timing}


# --------------------------------------------------------------------------------------------
# probes and heads


def task_of(cache, name: str):
    return next(t for t in cache.tasks if t.name == TASK.get(name, t.name))


def metric_of(cache, task) -> tuple[str, str]:
    import numpy as np

    from layercache.heads import default_metric

    counts = None
    if task.kind == "sequence":
        counts = np.bincount(cache.labels("train", task.name), minlength=task.num_classes)
    return default_metric(task, counts)


def probe_scores(cache, task, metric: str, max_train: int | None) -> dict:
    """Every state's linear probe, scored on the held-out split by ``metric`` (and accuracy)."""
    import numpy as np
    from sklearn.metrics import f1_score, matthews_corrcoef

    from layercache.probes import LinearProbes

    t0 = time.perf_counter()
    probes = LinearProbes(task=task.name, max_train=max_train).fit(cache)
    predicted, gold = probes.predictions(cache, HELD_OUT)  # (L, n), (n,)
    accuracy = [float((p == gold).mean()) for p in predicted]
    if task.kind == "token":
        from quality import span_f1  # benchmarks/quality.py: conlleval's entity F1

        counts = [int((np.asarray(s) >= 0).sum()) for s in cache.labels(HELD_OUT, task.name)]
        if sum(counts) != len(gold):
            raise RuntimeError("the probes left words out (truncation?); span F1 needs every word")
        bounds = np.cumsum([0, *counts])

        def sentences(tags) -> list[list[str]]:
            return [[task.label_names[i] for i in tags[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]

        scores = [float(span_f1(sentences(gold), sentences(p))) for p in predicted]
    elif metric == "mcc":
        scores = [float(matthews_corrcoef(gold, p)) for p in predicted]
    elif metric == "macro_f1":
        scores = [float(f1_score(gold, p, average="macro")) for p in predicted]
    else:
        scores = accuracy
    return {"states": list(probes.layer_names_), "test": scores, "test_accuracy": accuracy,
            "C": [float(c) for c in probes.C_], "n_train": int(probes.n_train_),
            "best_layer": int(probes.best_layer_), "seconds": time.perf_counter() - t0}


def head_scores(cache, task, metric: str, seeds: int, epochs: int, source: str, first_seed: int = 0) -> dict:
    """The default ``adaptive`` head over ``seeds`` seeds (one validation slice): held-out ``metric``."""
    from layercache import LayerHead

    runs, seconds, notes = [], [], set()
    for seed in range(first_seed, first_seed + seeds):
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            head = LayerHead(mixer="adaptive", tasks=[task.name], source=source, seed=seed, val_seed=0,
                             epochs=epochs, progress=False).fit(cache)
        notes.update(str(w.message).split("\n")[0][:160] for w in caught
                     if "pooled" in str(w.message).lower() or "collapse" in str(w.message).lower())
        metrics, _ = head.evaluate(cache, HELD_OUT)
        m = metrics[task.name]
        key = {"span_f1": "f1"}.get(metric, metric)
        value = m.get(metric, m.get(key))
        if value is None:
            raise KeyError(f"no {metric!r} among the head's metrics {sorted(m)}")
        runs.append(float(value))
        seconds.append(time.perf_counter() - t0)
        log(f"    adaptive ({source}) seed {seed}: {metric} {value:.4f} ({seconds[-1]:.0f} s)")
    return {"source": source, "runs": runs, "mean": statistics.fmean(runs),
            "sd": statistics.stdev(runs) if len(runs) > 1 else None, "spread": max(runs) - min(runs),
            "seconds": seconds, "epochs": epochs, "notes": sorted(notes)}


# --------------------------------------------------------------------------------------------


def variants_of(project: list[int]) -> list[dict]:
    out = [{"name": "fp16", "dtype": "float16", "project": None}, {"name": "int8", "dtype": "int8", "project": None}]
    out += [{"name": f"int8+p{k}", "dtype": "int8", "project": k} for k in project]
    return out


def bench_task(name: str, args, variants: list[dict]) -> dict:
    from layercache import LayerCache

    result = {"variants": {}}
    # 1. extraction, back to back (ABBA over the built variants when --extract-reps 2)
    order = list(variants)
    for rep in range(args.extract_reps):
        for v in (order if rep % 2 == 0 else order[::-1]):
            fresh = args.fresh or rep > 0
            log(f"{name}: extract {v['name']} (rep {rep + 1})")
            info = extract_variant(args.model, name, v, args.data, args.cache_dir, args.limit, fresh)
            entry = result["variants"].setdefault(v["name"], {"variant": v, "extract_runs": []})
            entry.update({k: info[k] for k in info if k not in ("extract_s", "loadavg")})
            if info["status"] == "ok":
                entry["extract_runs"].append(info.get("extract_s"))
                log(f"    {info['bytes'] / 1e6:.1f} MB, {info.get('extract_s') or float('nan'):.1f} s"
                    + (" (reused)" if info.get("reused") else ""))
            else:
                log(f"    {info['status']}")
    for entry in result["variants"].values():
        runs = [r for r in entry.pop("extract_runs", []) if r is not None]
        entry["extract_s_runs"] = runs
        entry["extract_s"] = statistics.median(runs) if runs else None
    # 2. probes and heads per built variant
    for v in variants:
        entry = result["variants"][v["name"]]
        if entry["status"] != "ok":
            continue
        with LayerCache.open(entry["path"]) as cache:
            task = task_of(cache, name)
            metric, why = metric_of(cache, task)
            result.update(task=task.name, kind=task.kind, metric=metric, metric_reason=why,
                          n_train=cache.num_examples("train"), n_test=cache.num_examples(HELD_OUT))
            if task.kind == "sequence":
                held_out = [int(x) for x in cache.labels(HELD_OUT, task.name)]
                result["test_majority_share"] = max(map(held_out.count, set(held_out))) / len(held_out)
            if not args.no_probes:
                log(f"{name} {v['name']}: linear probes")
                entry["probes"] = probe_scores(cache, task, metric, args.probe_max_train)
                log("    " + " ".join(f"{s:.4f}" for s in entry["probes"]["test"])
                    + f" ({entry['probes']['seconds']:.0f} s)")
            if not args.no_heads:
                seeds = args.seeds if not v["project"] or args.proj_seeds is None else args.proj_seeds
                log(f"{name} {v['name']}: adaptive head, {seeds} seeds")
                entry["head"] = head_scores(cache, task, metric, seeds, args.epochs, "tokens", args.first_seed)
                pooled_here = v["name"] == "fp16" or args.pooled_all
                if task.kind == "sequence" and pooled_here and not args.no_pooled:
                    log(f"{name} {v['name']}: adaptive head on pooled:mean")
                    entry["head_pooled"] = head_scores(cache, task, metric, args.seeds, args.epochs, "pooled:mean",
                                                      args.first_seed)
    return result


def summarise(name: str, r: dict) -> None:
    variants = r["variants"]
    base = variants.get("fp16", {})
    metric = r.get("metric", "?")
    # sizes and extraction
    rows = []
    for vname, e in variants.items():
        if e["status"] != "ok":
            rows.append([vname, e["status"][:60], "-", "-", "-"])
            continue
        size_ratio = e["bytes"] / base["bytes"] if base.get("bytes") else None
        time_ratio = (e["extract_s"] / base["extract_s"]) if e.get("extract_s") and base.get("extract_s") else None
        rows.append([vname, e["bytes"] / 1e6, size_ratio, e.get("extract_s"), time_ratio])
    print_table(f"{name}: cache size and extraction (train {r.get('n_train', 0):,}, test {r.get('n_test', 0):,})",
                ["variant", "MB on disk", "size / fp16", "extract s", "extract / fp16"], rows, digits=3)
    # probes per state
    if base.get("probes"):
        states = base["probes"]["states"]
        headers = ["state", "fp16"]
        cols = []
        for vname, e in variants.items():
            if vname == "fp16":
                continue
            headers += [vname, "diff (points)"]
            cols.append(e)
        rows = []
        for i, s in enumerate(states):
            row = [s, base["probes"]["test"][i]]
            for e in cols:
                if e.get("probes"):
                    row += [e["probes"]["test"][i], 100 * (e["probes"]["test"][i] - base["probes"]["test"][i])]
                else:
                    row += [NOT_BUILT if e["status"] != "ok" else "-", "-"]
            rows.append(row)
        print_table(f"{name}: linear probe per state, test {metric}", headers, rows, digits=4)
    # heads
    rows = []
    fp16_head = base.get("head")
    for vname, e in variants.items():
        for key, label in (("head", "tokens"), ("head_pooled", "pooled:mean")):
            h = e.get(key)
            if h is None:
                if key == "head" and e["status"] != "ok":
                    rows.append([f"{vname} adaptive ({label})", NOT_BUILT, "-", "-", "-"])
                continue
            diff = 100 * (h["mean"] - fp16_head["mean"]) if fp16_head else None
            rows.append([f"{vname} adaptive ({label})", f"{h['mean']:.4f} ± {h['sd'] or 0:.4f}", h["spread"], diff,
                         statistics.fmean(h["seconds"])])
    if rows:
        print_table(f"{name}: adaptive head, test {metric} (mean ± sd over seeds)",
                    ["head", "mean ± sd", "spread", "vs fp16 tokens (points)", "s / seed"], rows, digits=4)


QUICK = {"tasks": ["sst2"], "limit": 300, "variants": ["fp16", "int8"], "seeds": 1, "epochs": 5}
"""``--quick``: the first 300 SST-2 sentences of each file, fp16 and int8, one seed of the head at 5 epochs."""
QUICK_PROBE_POINTS = 2.0
"""--quick: every state's probe on int8 within this many points of fp16 (300 held-out sentences: 1 point is 3)."""


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``benchmarks/compare.py`` compares them), each one larger when worse: seconds
    (extraction, probes, a head seed), MB on disk and each variant's size over fp16's."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    for name, r in results["tasks"].items():
        base = r["variants"].get("fp16", {})
        for vname, e in r["variants"].items():
            if e.get("status") != "ok":
                continue
            key = f"{name}_{vname}".replace("+", "_")
            if e.get("extract_s") is not None and not e.get("reused"):  # a reused cache's time is another run's
                out[f"{key}_extract_s"] = e["extract_s"]
            out[f"{key}_mb"] = e["bytes"] / 1e6
            if vname != "fp16" and base.get("bytes"):
                out[f"{key}_size_over_fp16_ratio"] = e["bytes"] / base["bytes"]
            if e.get("probes"):
                out[f"{key}_probes_s"] = e["probes"]["seconds"]
            if e.get("head"):
                out[f"{key}_head_seed_s"] = statistics.fmean(e["head"]["seconds"])
    return out


def quick_checks(results: dict) -> list[str]:
    """What a quick run must show whatever the machine's speed: int8 stored smaller than fp16, every state's probe
    on int8 within QUICK_PROBE_POINTS of fp16's, and the fp16 head above the majority class on a balanced task."""
    failed = []
    for name, r in results["tasks"].items():
        fp16, int8 = r["variants"].get("fp16"), r["variants"].get("int8")
        if not fp16 or not int8 or fp16.get("status") != "ok" or int8.get("status") != "ok":
            failed.append(f"{name}: fp16 and int8 caches were not both built")
            continue
        if not int8["bytes"] < 0.75 * fp16["bytes"]:
            failed.append(f"{name}: int8 takes {int8['bytes'] / fp16['bytes']:.2f}x fp16's bytes (not < 0.75)")
        if fp16.get("probes") and int8.get("probes"):
            worst = max(abs(a - b) for a, b in zip(fp16["probes"]["test"], int8["probes"]["test"])) * 100
            if worst > QUICK_PROBE_POINTS:
                failed.append(f"{name}: a state's probe on int8 is {worst:.2f} points from fp16's "
                              f"(> {QUICK_PROBE_POINTS})")
        if r.get("metric") == "accuracy" and fp16.get("head") and "test_majority_share" in r:
            if not fp16["head"]["mean"] > r["test_majority_share"]:
                failed.append(f"{name}: the fp16 head's accuracy {fp16['head']['mean']:.4f} is not above the "
                              f"majority class's share {r['test_majority_share']:.4f}")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the first 300 SST-2 sentences of each file, fp16 and int8, one head seed at 5 epochs, no "
                             "pooled head; asserts int8 is smaller, its probes within 2 points of fp16's, and the head "
                             "above the majority class")
    parser.add_argument("--tasks", nargs="+", default=None, choices=list(DATASETS),
                        help="default cr mpqa conll (--quick sst2)")
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/quality"))
    parser.add_argument("--limit", type=int, default=None, help="the first N examples of each file (--quick 300)")
    parser.add_argument("--project", default="192,96,48",
                        help="projection widths K for int8 + projection ('' for none); rows say 'not built' where "
                             "extract has no projection yet")
    parser.add_argument("--variants", nargs="+", default=None,
                        help="only these variants (fp16, int8, int8+p<K>; --quick fp16 int8)")
    parser.add_argument("--seeds", type=int, default=None, help="default 3 (--quick 1)")
    parser.add_argument("--first-seed", type=int, default=0, help="the heads' seeds are first-seed, first-seed + 1 ...")
    parser.add_argument("--proj-seeds", type=int, default=None, help="seeds of the head on projected caches "
                        "(default: --seeds)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="the head's epochs at most (LayerHead's default 20; --quick 5)")
    parser.add_argument("--probe-max-train", type=int, default=None,
                        help="LinearProbes' max_train (default: every training example or word)")
    parser.add_argument("--extract-reps", type=int, default=1, help="2: extract ABBA and keep the median times")
    parser.add_argument("--fresh", action="store_true", help="extract again even where a complete cache exists")
    parser.add_argument("--no-probes", action="store_true")
    parser.add_argument("--no-heads", action="store_true")
    parser.add_argument("--no-pooled", action="store_true", help="no pooled:mean head (always with --quick)")
    parser.add_argument("--pooled-all", action="store_true", help="the pooled:mean head on every variant")
    parser.add_argument("--threads", default=None,
                        help="torch threads, or auto (default: the library's own policy, auto)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON output (default: benchmarks/results/storage_quality.json, "
                             "storage_quality-quick.json with --quick)")
    args = parser.parse_args()
    if not args.data.is_dir():
        sys.exit(f"no data folder at {args.data}; pass --data")
    if args.quick:
        args.tasks = args.tasks or QUICK["tasks"]
        args.limit = args.limit or QUICK["limit"]
        args.variants = args.variants or QUICK["variants"]
        args.seeds = args.seeds or QUICK["seeds"]
        args.epochs = args.epochs or QUICK["epochs"]
        args.no_pooled = True
    args.tasks = args.tasks or ["cr", "mpqa", "conll"]
    args.seeds = args.seeds or 3
    args.epochs = args.epochs or 20
    out = args.out or HERE / "results" / ("storage_quality-quick.json" if args.quick else "storage_quality.json")
    quiet_transformers()
    if args.threads:
        from layercache import use_threads  # kept by every computing call, even at torch's default count

        use_threads(None if args.threads == "auto" else int(args.threads))
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LAYERCACHE_HOME", str(args.cache_dir / "home"))  # never move the user's "latest cache"
    project = [int(k) for k in args.project.split(",") if k.strip()]
    variants = [v for v in variants_of(project) if not args.variants or v["name"] in args.variants]
    started = time.perf_counter()
    results = {"meta": machine_meta(args.quick, args.model, "cpu"),
               "args": {k: str(v) for k, v in vars(args).items()},
               "projection": projection_support() or NOT_BUILT, "tasks": {}}
    partial = Path(os.environ.get("LAYERCACHE_BENCH_JSON", out))  # where write_results puts the final file
    for name in args.tasks:
        results["tasks"][name] = bench_task(name, args, variants)
        summarise(name, results["tasks"][name])
        partial.parent.mkdir(parents=True, exist_ok=True)  # after every task, so a long run keeps what it measured
        partial.write_text(json.dumps(results, indent=2, default=str) + "\n")
    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["total_s"] = time.perf_counter() - started
    results["figures"] = figures(results)
    results["checks_failed"] = quick_checks(results) if args.quick else []
    write_results(results, out)
    if results["checks_failed"]:
        print("\nFAILED:\n  " + "\n  ".join(results["checks_failed"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
