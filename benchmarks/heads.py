"""Head benchmarks for layercache on all-MiniLM-L6-v2 (CPU): layer mixers, and cache vs live training.

Measures, on real data from ``../shared/data`` (see benchmarks/README.md):

1. mixers - every layer mixer (``last``, ``layer:0`` … ``layer:6`` as single-layer baselines, ``scalar``,
   ``adaptive``, ``attention``, ``gumbel``, ``act``) with its default head, trained from one cache per
   dataset: SST-2 dev accuracy and CoNLL-2003 valid entity (span) F1, with training times.
   Target: ``adaptive`` at least as good as the best single layer on both.
2. live   - the same adaptive head on SST-2 trained for a fixed number of epochs from the cache and
   with the live backbone (a forward pass per batch, :class:`layercache.live.feed.LiveFeed`):
   training times, extraction time and dev accuracy of both. Targets: cache >= 20x faster
   excluding the one extraction, >= 4x including it, equal accuracy within 1 point.

Protocol (both parts): train on the train split minus a seeded 10% validation slice of it
(stratified by label for SST-2), validate on that slice after every epoch and keep the best epoch,
report once on the held-out split (SST-2 ``dev.tsv``, CoNLL ``valid.txt``), which no choice sees.

Run ``python benchmarks/heads.py`` (estimated 15-20 minutes on 2 idle CPU cores) or ``--quick`` (small
subsets: under a minute on idle cores, a few minutes when other work shares them). Prints tables and writes
JSON (default ``benchmarks/results/heads.json``, ``heads-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # _common.py, when imported from elsewhere
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, quiet_transformers, work_folder, write_results  # noqa: E402

MODEL = "minilm"
DEVICE = "cpu"
THREADS = 2
REPORT_SPLIT = "test"  # the held-out split's name in the caches: not a validation name, so nothing selects on it
VAL_FRACTION = 0.1
TRAIN_BATCH = 32
# As LayerHead: the validation slice is scored every epoch in training-sized batches, the held-out
# split once in batches of 128. (On 2 cores, the adaptive head validates ~2x faster in batches of
# 32 than of 128: the large batches' tensors outgrow the caches and glibc's mmap threshold.)
VAL_BATCH = TRAIN_BATCH
EVAL_BATCH = 128

# name -> (train file, held-out file, what the held-out file is)
DATASETS = {
    "sst2": ("sst2/train.tsv", "sst2/dev.tsv", "SST-2 dev"),
    "conll": ("conll2003/train.txt", "conll2003/valid.txt", "CoNLL-2003 valid"),
}
SINGLE_LAYERS = [f"layer:{i}" for i in range(7)]  # MiniLM: embeddings + 6 layers
MIXERS = ["last", *SINGLE_LAYERS, "scalar", "adaptive", "attention", "gumbel", "act"]

# The head of the cache-vs-live comparison: the adalayers sequence head in the configuration of the
# live reference run in ../shared/METHODS.md (k 64, alpha 70, cutoff 0.005, 16 heads, batch 32;
# 3 epochs -> 0.829 dev accuracy in 320 s on this machine), trained identically on both sides.
LIVE_HEAD = {"k": 64, "alpha": 70.0, "cutoff": 0.005}

TARGETS = {
    "adaptive_vs_best_single_layer": ">= (both datasets)",
    "live_over_cache_excluding_extraction_min": 20.0,
    "live_over_cache_including_extraction_min": 4.0,
    "accuracy_difference_max_points": 1.0,
}


# --------------------------------------------------------------------------------------------
# small helpers (tables and load averages: _common.py)


def print_table(title: str, headers: list[str], rows: list[list], note: str | None = None) -> None:
    """Tables of scores: three decimals."""
    _common.print_table(title, headers, rows, note, digits=3)


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


# --------------------------------------------------------------------------------------------
# data and caches


def dataset_files(data: Path, name: str) -> dict[str, str]:
    train, held_out, _ = DATASETS[name]
    return {"train": str(data / train), REPORT_SPLIT: str(data / held_out)}


def cache_limit(files: dict[str, str], n_train: int | None, n_test: int | None) -> int | None:
    """``extract(limit=)`` keeps the first N examples of *each* split: enough for both sizes asked for.

    The heads then train and report on the first ``n_train`` / ``n_test`` examples (:func:`first_rows`).
    """
    if n_train is None:
        return None
    if n_test is None:  # all of the held-out file
        from layercache.sources.datasets import load_dataset_records

        n_test = len(load_dataset_records(None, split_files={REPORT_SPLIT: files[REPORT_SPLIT]}).splits[REPORT_SPLIT])
    return max(n_train, n_test)


def get_cache(name: str, files: dict[str, str], limit: int | None, cache_dir: Path) -> tuple[Path, dict]:
    """Extract (or reuse) the cache of one dataset; returns its path and the extraction's timing."""
    from layercache import extract

    path = cache_dir / f"{name}-{limit or 'all'}"
    timing_file = cache_dir / f"{name}-{limit or 'all'}.extract-time.json"
    t0 = time.perf_counter()
    result = extract(MODEL, None, path, split_files=files, limit=limit, device=DEVICE, progress=False)
    seconds = time.perf_counter() - t0
    if result.already_complete and timing_file.is_file():
        info = {**json.loads(timing_file.read_text()), "reused": True}
    elif result.already_complete:
        info = {"extract_s": None, "reused": True, "note": "cache reused; its extraction time was not recorded"}
    else:
        m = result.manifest
        info = {"extract_s": seconds, "reused": False, "loadavg": loadavg(),
                "splits": {k: {"examples": s.n_examples, "tokens": s.n_tokens} for k, s in m.splits.items()},
                "what": "extract() wall time: data load, model load, tokenization, forward, fp16 shards"}
        timing_file.write_text(json.dumps(info, indent=2) + "\n")
    return path, info


def first_rows(cache, split: str, n: int | None):
    """Cache rows of the first ``n`` examples of the source file (cache rows are sorted by length)."""
    import numpy as np

    index = cache.example_index(split)
    return np.nonzero(index < n)[0] if n is not None else np.arange(len(index))


def validation_split(cache, rows, seed: int):
    """(train rows, validation rows): a seeded 10% slice of ``rows``, stratified by a sequence label."""
    import numpy as np

    rng = np.random.default_rng(seed)
    task = next((t for t in cache.tasks if t.kind == "sequence"), None)
    strata = np.asarray(cache.labels("train", task.name))[rows] if task is not None else np.zeros(len(rows))
    val = []
    for value in np.unique(strata):
        members = rng.permutation(rows[strata == value])
        val.append(members[: int(round(VAL_FRACTION * len(members)))])
    val = np.sort(np.concatenate(val))
    return np.setdiff1d(rows, val), val


# --------------------------------------------------------------------------------------------
# training one head


def build_model(cache, mixer: str, seed: int, mixer_options: dict | None = None):
    from layercache.heads.estimator import default_lr
    from layercache.heads.network.model import HeadModel
    from layercache.heads.training.trainer import seed_everything

    seed_everything(seed)  # as LayerHead.fit: the same initialisation for the same seed
    model = HeadModel(len(cache.layer_names), cache.hidden_size, list(cache.tasks), mixer=mixer,
                      mixer_options=mixer_options)
    return model, default_lr(model)


def fit_and_score(model, lr: float, train_feed, val_feed, test_feed, *, epochs: int, patience: int, seed: int,
                  profile: bool = False) -> dict:
    """``train_model`` (the loop ``LayerHead.fit`` runs) then one scoring pass on the held-out feed."""
    from layercache.heads.scoring.evaluation import evaluate, primary_metric
    from layercache.heads.training.trainer import TrainConfig, train_model

    config = TrainConfig(epochs=epochs, batch_size=train_feed.batch_size, lr=lr, patience=patience, seed=seed)
    profiler = cProfile.Profile() if profile else None
    c0 = time.process_time()
    if profiler:
        profiler.enable()
    history = train_model(model, train_feed, val_feed, config, device=DEVICE, progress=False)
    if profiler:
        profiler.disable()
    cpu = time.process_time() - c0
    t0 = time.perf_counter()
    metrics, result = evaluate(model, test_feed, DEVICE)
    eval_s = time.perf_counter() - t0
    task = model.tasks[0]
    metric = primary_metric(task)
    weights = model.layer_weights()["shared"]
    usage = {k: {m: float(v) for m, v in u.items()} for k, u in result.usage.items()}
    out = {
        "task": task.name, "metric": metric, "score": float(metrics[task.name][metric]),
        "test_metrics": {k: v for k, v in metrics[task.name].items() if k not in ("report", "per_type")},
        "train_s": history.seconds, "train_cpu_s": cpu, "eval_s": eval_s,
        "epochs_run": len(history.epochs), "best_epoch": history.best_epoch, "val_score": history.best_score,
        "stopped_early": history.stopped_early,
        "epoch_s": [e.seconds for e in history.epochs], "val_per_epoch": [e.val_score for e in history.epochs],
        "train_loss_per_epoch": [e.train_loss for e in history.epochs],
        "lr": lr, "n_train": train_feed.n_examples, "n_val": val_feed.n_examples, "n_test": test_feed.n_examples,
        "layer_weights": weights, "usage": usage,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if profiler:
        out["profile"] = profile_summary(profiler, history.seconds)
    return out


def profile_summary(profiler: cProfile.Profile, wall: float, top: int = 25) -> dict:
    """The functions where training spends its time (cProfile, by own time and by cumulative time)."""
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, func), (_, nc, tt, ct, _) in stats.stats.items():
        rows.append({"function": f"{Path(file).name}:{line}({func})", "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
    return {"wall_s": wall, "by_tottime": sorted(rows, key=lambda r: -r["tottime_s"])[:top],
            "by_cumtime": sorted(rows, key=lambda r: -r["cumtime_s"])[:top], "text": text.getvalue()}


# --------------------------------------------------------------------------------------------
# 1. every mixer on both datasets


def bench_mixers(caches: dict, sizes: dict, mixers: list[str], epochs: int, patience: int, seed: int) -> dict:
    from layercache import LayerCache
    from layercache.heads.data.source import resolve_source
    from layercache.store.cache_feed import CacheFeed

    out = {}
    for name, (path, _) in caches.items():
        cache = LayerCache.open(path)
        tasks = [t.name for t in cache.tasks]
        train_rows, val_rows = validation_split(cache, first_rows(cache, "train", sizes[name]["train"]), seed)
        test_rows = first_rows(cache, REPORT_SPLIT, sizes[name]["test"])
        feeds = {}  # one (train, val, test) triple of feeds per source, built the first time a head needs it
        runs = {}
        for mixer in mixers:
            model, lr = build_model(cache, mixer, seed)
            source = resolve_source(cache, "auto", list(cache.tasks), model)
            # As LayerHead.fit: heads that cannot tell mean-pooled vectors from token states read the former.
            if source not in feeds:
                feeds[source] = (
                    CacheFeed(cache, "train", tasks=tasks, rows=train_rows, batch_size=TRAIN_BATCH, source=source),
                    CacheFeed(cache, "train", tasks=tasks, rows=val_rows, batch_size=VAL_BATCH, source=source),
                    CacheFeed(cache, REPORT_SPLIT, tasks=tasks, rows=test_rows, batch_size=EVAL_BATCH, source=source))
            runs[mixer] = fit_and_score(model, lr, *feeds[source], epochs=epochs, patience=patience, seed=seed)
            runs[mixer]["source"] = source
            r = runs[mixer]
            log(f"{name:5s} {mixer:10s} {r['metric']} {r['score']:.4f}  ({r['epochs_run']} epochs, best "
                f"{r['best_epoch']}, {r['train_s']:.1f}s, {source})")
        singles = {m: runs[m]["score"] for m in ("last", *SINGLE_LAYERS) if m in runs}
        best_single = max(singles, key=singles.get) if singles else None
        verdict = None
        if best_single is not None and "adaptive" in runs:
            verdict = runs["adaptive"]["score"] >= singles[best_single]
        out[name] = {"runs": runs, "n_train": len(train_rows), "n_val": len(val_rows), "n_test": len(test_rows),
                     "best_single_layer": best_single, "best_single_score": singles.get(best_single),
                     "adaptive_at_least_best_single": verdict, "loadavg_end": loadavg()}
        cache.close()
    return out


# --------------------------------------------------------------------------------------------
# 2. cache vs live for the same head


def bench_live(cache_path: Path, extract_info: dict, files: dict, limit: int | None, sizes: dict, epochs: int,
               live_epochs: int, seed: int, profile: bool, bucket: int = 0, head: dict = LIVE_HEAD,
               cache_reps: int = 3) -> dict:
    from layercache import LayerCache, load_backbone
    from layercache.heads.scoring.evaluation import evaluate
    from layercache.live.feed import LiveFeed
    from layercache.sources.datasets import load_dataset_records
    from layercache.store.cache_feed import CacheFeed

    cache = LayerCache.open(cache_path)
    tasks = [t.name for t in cache.tasks]
    train_rows, val_rows = validation_split(cache, first_rows(cache, "train", sizes["train"]), seed)
    test_rows = first_rows(cache, REPORT_SPLIT, sizes["test"])

    # Cache side: extraction already done (timed separately); only the head's training counts.
    # A 15-second run moves by 10-20 % with the machine's load, so it is repeated (fresh feeds, so
    # every repetition reads the cache again) and the median time is the one compared; the seeded
    # runs must agree on accuracy.
    cache_runs = []
    for rep in range(cache_reps):
        log(f"cache: adaptive {head}, {epochs} epochs, no early stopping (repetition {rep + 1}/{cache_reps})")
        model, lr = build_model(cache, "adaptive", seed, head)
        run = fit_and_score(
            model, lr, CacheFeed(cache, "train", tasks=tasks, rows=train_rows, batch_size=TRAIN_BATCH),
            CacheFeed(cache, "train", tasks=tasks, rows=val_rows, batch_size=VAL_BATCH),
            CacheFeed(cache, REPORT_SPLIT, tasks=tasks, rows=test_rows, batch_size=EVAL_BATCH),
            epochs=epochs, patience=0, seed=seed, profile=profile and rep == 0)
        log(f"cache: {run['train_s']:.1f}s, dev accuracy {run['score']:.4f}")
        cache_runs.append((run, model))
    cache_run, cache_model = sorted(cache_runs, key=lambda rm: rm[0]["train_s"])[cache_reps // 2]
    cache_run = {**cache_run, "train_s_reps": [r["train_s"] for r, _ in cache_runs],
                 "scores_reps": [r["score"] for r, _ in cache_runs]}

    # Live side: same rows, same head, same seed and hyper-parameters; the backbone runs on every batch.
    t0 = time.perf_counter()
    backbone = load_backbone(MODEL, device=DEVICE)
    records = load_dataset_records(None, split_files=files, limit=limit)
    setup_s = time.perf_counter() - t0
    train_feed = LiveFeed.matching_cache(cache, "train", backbone, records, rows=train_rows, batch_size=TRAIN_BATCH,
                                         bucket_batches=bucket)
    val_feed = LiveFeed.matching_cache(cache, "train", backbone, records, rows=val_rows, batch_size=VAL_BATCH)
    test_feed = LiveFeed.matching_cache(cache, REPORT_SPLIT, backbone, records, rows=test_rows,
                                        batch_size=EVAL_BATCH)
    log(f"live: adaptive, {live_epochs} epochs, backbone forward per batch ({len(train_feed)} batches/epoch)")
    model, lr = build_model(cache, "adaptive", seed, head)
    live_run = fit_and_score(model, lr, train_feed, val_feed, test_feed, epochs=live_epochs, patience=0, seed=seed)
    live_run["forward_s_train_and_val"] = train_feed.forward_seconds + val_feed.forward_seconds
    live_run["forward_s_eval"] = test_feed.forward_seconds
    live_run["padding_efficiency_train"] = train_feed.padding_efficiency
    live_run["padding_efficiency_val"] = val_feed.padding_efficiency
    live_run["setup_s"] = setup_s
    extrapolated = live_epochs != epochs
    measured_live_s = live_run["train_s"]
    live_train_s = measured_live_s * epochs / live_epochs
    log(f"live: {measured_live_s:.1f}s for {live_epochs} epoch(s), dev accuracy {live_run['score']:.4f}")

    # Interchangeability: the cache-trained head scored on the live backbone's states.
    t0 = time.perf_counter()
    cross, _ = evaluate(cache_model, test_feed, DEVICE)
    cross_score = float(cross[cache_run["task"]][cache_run["metric"]])
    cross_s = time.perf_counter() - t0

    extract_s = extract_info.get("extract_s")
    out = {
        "head": {"mixer": "adaptive", **head}, "epochs": epochs, "live_epochs_measured": live_epochs,
        "live_extrapolated": extrapolated,
        "live_bucket_batches": bucket,
        "n_train": len(train_rows), "n_val": len(val_rows), "n_test": len(test_rows),
        "cache": cache_run, "live": live_run, "extract": extract_info,
        "cache_train_s": cache_run["train_s"], "live_train_s": live_train_s, "live_train_s_measured": measured_live_s,
        "extract_s": extract_s,
        "speedup_excluding_extraction": live_train_s / cache_run["train_s"],
        "speedup_including_extraction": (live_train_s / (cache_run["train_s"] + extract_s)
                                         if extract_s is not None else None),
        "dev_accuracy_cache": cache_run["score"], "dev_accuracy_live": live_run["score"],
        "accuracy_difference_points": 100 * (live_run["score"] - cache_run["score"]),
        "cache_head_on_live_states_accuracy": cross_score, "cache_head_on_live_states_eval_s": cross_s,
        "loadavg_end": loadavg(),
    }
    cache.close()
    return out


# --------------------------------------------------------------------------------------------
# main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small smoke run on subsets (about 2 minutes)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default: benchmarks/results/heads.json, heads-quick.json with --quick)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help=f"folder with sst2/ and conll2003/ (default: {DEFAULT_DATA})")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="keep the caches here and reuse them on the next run (default: a temp dir, removed)")
    p.add_argument("--only", nargs="+", choices=["mixers", "live"], default=None, help="run only these parts")
    p.add_argument("--mixers", nargs="+", default=None, help=f"mixers to train (default: {' '.join(MIXERS)})")
    p.add_argument("--sst2-train", type=int, default=None,
                   help="first N SST-2 train sentences (default all 6,920; --quick 400)")
    p.add_argument("--sst2-dev", type=int, default=None, help="first N SST-2 dev sentences (default all 1,821; "
                                                              "--quick 200)")
    p.add_argument("--conll-train", type=int, default=None,
                   help="first N CoNLL-2003 train sentences (default 4000; --quick 300)")
    p.add_argument("--conll-valid", type=int, default=None,
                   help="first N CoNLL-2003 valid sentences (default all 3,250; --quick 200)")
    p.add_argument("--epochs", type=int, default=None,
                   help="maximum epochs per mixer, early stopping on the validation slice (default 10; --quick 2)")
    p.add_argument("--patience", type=int, default=3, help="early-stopping patience in epochs (default 3)")
    p.add_argument("--live-epochs", type=int, default=None,
                   help="epochs of the cache-vs-live comparison, no early stopping (default 5; --quick 3)")
    p.add_argument("--live-measured-epochs", type=int, default=None,
                   help="train the live side for only this many epochs and extrapolate its time to --live-epochs "
                        "(default: measure them all)")
    p.add_argument("--live-bucket", type=int, default=0,
                   help="live batches: 0 = random batches padded to their longest example (the usual live setup, "
                        "default); N = sort buckets of N batches by length, as the cache feed does (N = 16)")
    p.add_argument("--cache-reps", type=int, default=3,
                   help="repetitions of the cache side of part 2; its median time is compared (default 3)")
    p.add_argument("--matmul-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="the adaptive head's projection product in part 2, on both sides (AdaptiveMix matmul_dtype; "
                        "default float32)")
    p.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS})")
    p.add_argument("--profile", action="store_true",
                   help="cProfile the cache-side training of part 2 and print where its time goes")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def check_data(data: Path) -> None:
    missing = [str(data / f) for name in DATASETS for f in DATASETS[name][:2] if not (data / f).is_file()]
    if missing:
        sys.exit(f"benchmarks/heads.py: benchmark data not found: {', '.join(missing)}.\n"
                 f"It reads SST-2 and CoNLL-2003 from {data} (the shared data folder next to the repository); "
                 "pass --data FOLDER holding sst2/{train,dev}.tsv and conll2003/{train,valid}.txt.")


def main(argv=None) -> int:
    args = parse_args(argv)
    data = args.data.expanduser().resolve()
    check_data(data)
    quick = args.quick
    sizes = {
        "sst2": {"train": args.sst2_train or (400 if quick else None),
                 "test": args.sst2_dev or (200 if quick else None)},
        "conll": {"train": args.conll_train or (300 if quick else 4000),
                  "test": args.conll_valid or (200 if quick else None)},
    }
    epochs = args.epochs or (2 if quick else 10)
    live_epochs = args.live_epochs or (3 if quick else 5)
    live_measured = args.live_measured_epochs or live_epochs
    if not 1 <= live_measured <= live_epochs:
        sys.exit("--live-measured-epochs must be between 1 and --live-epochs.")
    mixers = args.mixers or MIXERS
    only = set(args.only or ["mixers", "live"])
    out_json = args.out or (HERE / "results" / ("heads-quick.json" if quick else "heads.json"))

    quiet_transformers()
    import torch

    import layercache
    from layercache.heads import make_mixer

    for m in mixers:
        make_mixer(m, 7, 384)  # a typo fails now, not after the extraction
    from layercache.core.threads import use_threads  # kept by every computing call, even at torch's default count

    use_threads(args.threads)
    t_start = time.perf_counter()
    with work_folder(args.cache_dir, "layercache-heads-bench-") as workdir:
        meta = {
            **machine_meta(quick, MODEL, DEVICE), "data": str(data), "sizes": sizes, "mixers": mixers, "epochs": epochs,
            "patience": patience_text(args.patience), "live_epochs": live_epochs,
            "live_measured_epochs": live_measured, "seed": args.seed, "train_batch": TRAIN_BATCH,
            "val_batch": VAL_BATCH, "eval_batch": EVAL_BATCH, "val_fraction": VAL_FRACTION,
            "protocol": "train on the train split minus a seeded 10% validation slice (stratified by label for "
                        "SST-2); validate every epoch on the slice, keep the best epoch; report once on the "
                        "held-out split (SST-2 dev.tsv, CoNLL-2003 valid.txt). Default heads and learning rates "
                        "(1e-3 adaptive, 1e-2 linear heads), AdamW, linear decay with 6% warm-up, batch 32.",
            "note": "2 CPU cores possibly shared with other work; load averages are recorded.",
        }
        print(f"layercache {layercache.__version__} heads benchmark ({'quick' if quick else 'full'}): {MODEL} on "
              f"{DEVICE}, torch {torch.__version__}, {torch.get_num_threads()} torch threads, {os.cpu_count()} CPU "
              f"cores, load avg {loadavg()}", flush=True)
        results: dict = {"meta": meta, "targets": TARGETS}

        need = (["sst2", "conll"] if "mixers" in only else []) + (["sst2"] if "live" in only else [])
        caches = {}
        print("\n[0] caches (one extraction per dataset, reused by every head)", flush=True)
        for name in dict.fromkeys(need):
            files = dataset_files(data, name)
            limit = cache_limit(files, sizes[name]["train"], sizes[name]["test"])
            path, info = get_cache(name, files, limit, workdir)
            info["limit"] = limit
            caches[name] = (path, info)
            log(f"{name}: {path.name} " + (f"extracted in {info['extract_s']:.1f}s" if info.get("extract_s") and
                                           not info["reused"] else "reused"))
        results["caches"] = {k: {"path": str(p), **i} for k, (p, i) in caches.items()}

        if "mixers" in only:
            print(f"\n[1/2] mixers: {len(mixers)} heads x 2 datasets, up to {epochs} epochs, "
                  f"patience {args.patience}", flush=True)
            t = time.perf_counter()
            results["mixers"] = bench_mixers({k: caches[k] for k in ("sst2", "conll")}, sizes, mixers, epochs,
                                             args.patience, args.seed)
            results["mixers"]["seconds"] = time.perf_counter() - t
        if "live" in only:
            print(f"\n[2/2] cache vs live: adaptive head on SST-2, {live_epochs} epochs"
                  + (f" (live side: {live_measured} measured, time extrapolated)" if live_measured != live_epochs
                     else ""), flush=True)
            t = time.perf_counter()
            path, info = caches["sst2"]
            results["live"] = bench_live(path, info, dataset_files(data, "sst2"), info["limit"], sizes["sst2"],
                                         live_epochs, live_measured, args.seed, args.profile, args.live_bucket,
                                         head={**LIVE_HEAD, "matmul_dtype": args.matmul_dtype},
                                         cache_reps=args.cache_reps)
            results["live"]["seconds"] = time.perf_counter() - t
        meta["loadavg_end"] = loadavg()
        meta["total_s"] = time.perf_counter() - t_start

    report(results)
    write_results(results, out_json)
    return 0


def patience_text(patience: int) -> str:
    return "none (all epochs)" if patience == 0 else f"{patience} epochs"


def report(results: dict) -> None:
    meta = results["meta"]
    print("\n" + "=" * 100)
    print(f"Results: {meta['model']}, {meta['device']}, {meta['torch_threads']} torch threads, "
          f"{meta['cpu_count']} CPU cores, load avg start {meta['loadavg_start']} end {meta['loadavg_end']}"
          + ("  [QUICK: small subsets, numbers are a smoke test only]" if meta["quick"] else ""))

    if "mixers" in results:
        res = results["mixers"]
        names = [n for n in ("sst2", "conll") if n in res]
        mixers = list(res[names[0]]["runs"]) if names else []
        rows = []
        for m in mixers:
            row = [m]
            for n in names:
                r = res[n]["runs"][m]
                row += [r["score"], f"{r['best_epoch']}/{r['epochs_run']}", r["train_s"],
                        r["train_s"] / max(r["epochs_run"], 1)]
            row.append(top_layer(res[names[0]]["runs"][m]) if names else "-")
            rows.append(row)
        headers = ["mixer"]
        for n in names:
            short = "SST-2 dev acc" if n == "sst2" else "CoNLL valid F1"
            headers += [short, "best/epochs", "train s", "s/epoch"]
        headers.append("top state (SST-2)")
        sizes_text = "; ".join(f"{n}: train {res[n]['n_train']:,} (+{res[n]['n_val']:,} validation slice), "
                               f"reported on {res[n]['n_test']:,}" for n in names)
        verdicts = []
        for n in names:
            ok = res[n]["adaptive_at_least_best_single"]
            if ok is None:
                continue
            a = res[n]["runs"]["adaptive"]["score"]
            verdicts.append(f"{n}: adaptive {a:.4f} vs best single layer {res[n]['best_single_layer']} "
                            f"{res[n]['best_single_score']:.4f} -> {'PASS' if ok else 'FAIL'}")
        print_table(
            f"1. Mixers (default heads; up to {meta['epochs']} epochs, patience {meta['patience']})",
            headers, rows,
            note=f"{sizes_text}\n"
                 "score = accuracy on SST-2 dev.tsv / entity span F1 on CoNLL-2003 valid.txt (never used for "
                 "selection);\nbest/epochs = kept epoch / epochs run; train s = train_model wall time including "
                 "the per-epoch validation pass.\n"
                 "top state = the state with the largest global weight (scalar/adaptive/attention/...; "
                 "single layers: fixed).\n"
                 "Target: adaptive >= best single layer (last, layer:0..6) on both datasets:\n  "
                 + "\n  ".join(verdicts or ["(not measured)"]))

    if "live" in results:
        r = results["live"]
        ex = r["extract"]
        extra = (f" (time EXTRAPOLATED from {r['live_epochs_measured']} measured epoch(s); accuracy after "
                 f"{r['live_epochs_measured']})" if r["live_extrapolated"] else "")
        rows = [
            ["cache: head training (cache already extracted; median of "
             + ", ".join(f"{t:.1f}" for t in r["cache"].get("train_s_reps", [r["cache_train_s"]])) + " s)",
             r["cache_train_s"], r["dev_accuracy_cache"]],
            ["cache: extraction (train + dev, once)", r["extract_s"], None],
            ["cache: extraction + head training", (r["extract_s"] or 0) + r["cache_train_s"], None],
            [f"live: head training, backbone forward per batch{extra}", r["live_train_s"], r["dev_accuracy_live"]],
            ["   of which backbone forward (train + validation, measured)",
             r["live"]["forward_s_train_and_val"], None],
            ["cache-trained head scored on live states", r["cache_head_on_live_states_eval_s"],
             r["cache_head_on_live_states_accuracy"]],
        ]
        head = {k: v for k, v in r["head"].items() if k != "mixer"}
        print_table(f"2. Cache vs live: adaptive head {head}, SST-2, {r['epochs']} epochs, no early stopping, "
                    f"same seed and hyper-parameters (train {r['n_train']:,}, validation slice {r['n_val']:,}, "
                    f"dev {r['n_test']:,})",
                    ["what", "seconds", "dev accuracy"], rows,
                    note="Training times are train_model wall time: every epoch plus the validation pass after it "
                         "(the live side runs the backbone there too).\n"
                         + (f"Live batches: random order, padded to the longest example (padding efficiency "
                            f"{r['live']['padding_efficiency_train']:.2f}); the cache feed sorts buckets of 16 "
                            "batches by length, so the two see different batches (early epochs can differ).\n"
                            if not r["live_bucket_batches"] else
                            f"Live batches: buckets of {r['live_bucket_batches']} batches sorted by length, like the "
                            f"cache feed (padding efficiency {r['live']['padding_efficiency_train']:.2f}).\n")
                         + ("Extraction time not measured in this run (cache reused)."
                            if r["extract_s"] is None else f"Extraction load avg {ex.get('loadavg')}."))
        checks = [
            ("live / cache, excluding extraction", r["speedup_excluding_extraction"],
             TARGETS["live_over_cache_excluding_extraction_min"], ">="),
            ("live / (extraction + cache)", r["speedup_including_extraction"],
             TARGETS["live_over_cache_including_extraction_min"], ">="),
            ("|accuracy live - cache| (points)", abs(r["accuracy_difference_points"]),
             TARGETS["accuracy_difference_max_points"], "<="),
        ]
        if r["live_extrapolated"]:  # the live head trained fewer epochs: its accuracy is not comparable
            checks[2] = (checks[2][0] + " [live trained fewer epochs: not checked]", None, checks[2][2], "<=")
        rows = []
        for what, value, target, op in checks:
            ok = None if value is None else (value >= target if op == ">=" else value <= target)
            rows.append([what, value, f"{op} {target:g}", "-" if ok is None else ("PASS" if ok else "FAIL")])
        print_table("   targets", ["ratio", "value", "target", "result"], rows)
        prof = r["cache"].get("profile")
        if prof:
            rows = [[p["function"], p["calls"], p["tottime_s"], p["cumtime_s"]] for p in prof["by_tottime"][:20]]
            print_table(f"   cProfile of the cache-side training ({prof['wall_s']:.1f}s wall; top 20 by own time)",
                        ["function", "calls", "own s", "cumulative s"], rows)


def top_layer(run: dict) -> str:
    w = run.get("layer_weights")
    if not w:
        return "-"
    i = max(range(len(w)), key=w.__getitem__)
    return f"{i} ({w[i]:.2f})"


if __name__ == "__main__":
    sys.exit(main())
