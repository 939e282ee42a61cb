"""What each storage choice of a MiniLM cache costs in quality, and whether ``layercache plan`` predicts it (issue 37).

For each task (all-MiniLM-L6-v2, ``minilm``: 7 states x D = 384, on ``../shared/data``) and each storage choice,
the loss against the float32 states, in points of the task's selection metric (100 x accuracy for SST-2 and
BShift, Matthews correlation for the imbalanced CR and MPQA, entity F1 for CoNLL-2003 NER), measured with the
library's own quality check (:func:`layercache.planning.measure_quality`: every choice's cache written by
extraction from one forward pass, per-state linear probes fitted at the float32 reference's ``C``, and quick
default heads, each against the reference's):

- tasks: ``sst2`` (train.tsv, scored on dev.tsv), ``cr`` and ``mpqa`` (the same), ``conll2003`` (train.txt, scored
  on valid.txt, the ``ner`` column only) and ``bshift`` (SentEval's bigram shift built from SST-2's sentences by
  ``benchmarks/weak_signal.py``: word order only, a signal in low-variance directions that PCA may drop);
- choices: tokens float16, int8, int4; int8 and int4 + project K for K = D/2, D/4, D/8, each with the PCA basis and
  with the standardized one (``StorageSpec(project_basis="standardized")``, rows ``... (standardized)``); pooled
  float16 (sequence tasks only: a pooled cache has no token states);
- bytes (``x f16``): each choice's whole cache (every split, a projection's basis file) over float16's, as
  ``layercache plan`` prices it (:func:`~layercache.planning.plan_cache` with the quality check off: ``choice_bytes``
  on the real, full split plans, whatever slice the losses are measured on; not the sample caches' sizes); a
  standardized basis takes the PCA basis's bytes. ``states x f16``: the token states alone (each cache less what
  the pooled-only cache takes: every cache keeps float16 pooled vectors, which on short sentences are ~5 % of
  float16's bytes and put whole-cache int8 at ~0.53x and int4 at ~0.31x).

Two measurements per task:

1. **predicted**: what ``plan`` says: ``labelled_sample(inputs, BatchSpec(), --plan-examples, seed=0)`` (2,000
   examples learned on, at most as many scored), probes on every choice, quick heads (``--head-epochs``, default
   the plan's 4) on float16, int8, int4 and int8 + project D/4 (both bases);
2. **measured**: the same check on ``labelled_sample(..., --max-examples)`` (default 20,000: the whole train
   split, and the whole scored split, unless the library cuts the sample to fit its memory bound, which the
   sample's description then says), drawn once; the learners run with each of ``--seeds`` (default 0 1 2).
   Seed 0 measures every choice's probes; the other seeds measure the heads (and their choices' probes) only,
   since a probe converges to one optimum. Each head's loss is reported as its mean and min-max over the seeds,
   and float16's head score spread (max - min over the seeds) beside it.

Each row: bytes / float16, the measured probe loss and its 95 % interval (paired bootstrap), the measured head
loss (mean, min-max), the predicted probe and head losses, and |predicted - measured|.

Targets (issue 37), the bytes judged on the whole cache (and, beside, on the token states alone):

- A: a choice at <= 0.30x of float16's bytes whose head stays inside float16's seed spread on every task (its
  mean head score over the seeds at least float16's lowest);
- B: a choice at <= 0.15x that loses at most 1 point on every sequence task (the measured probe loss, and the
  head's mean loss where a head was measured: pooled float16 has no head row, its probes decide);
- C: the predicted probe loss within 2 points of the measured one, for every task and choice (the heads'
  difference is reported beside it, not judged: a quick head moves a few points with its seed).

    python benchmarks/choice_quality.py                                  # every task: est. 1-1.5 h on 2 idle cores
    python benchmarks/choice_quality.py --tasks cr bshift --seeds 0      # two small tasks
    python benchmarks/choice_quality.py --quick                          # smoke run, 1.5-3 minutes

``--quick``: the first 200 examples of each split of ``cr`` and ``bshift``, one seed, one head epoch, float16,
int8, int4 and int8 + project D/4 (both bases), predicted on 100 examples; it asserts what does not depend on
timing (every loss inside its interval, float16's probe loss within 1 point of 0, the token states of int8 at
0.5x and of int4 at 0.28x of float16's within 0.02). Prints a table per task and the targets, and writes JSON
(default ``benchmarks/results/choice_quality.json``). The sample caches go to ``--workdir`` (default a temporary folder)
and are removed after each check.
"""

from __future__ import annotations

import argparse
import gc
import math
import shutil
import statistics
import sys
import time
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
    work_folder,
    write_results,
)

MODEL = "minilm"
TASKS = {  # name -> split files under the data folder (or None: built by weak_signal.write_task), label columns
    "sst2": ({"train": "sst2/train.tsv", "test": "sst2/dev.tsv"}, None),
    "cr": ({"train": "cr/train.tsv", "test": "cr/dev.tsv"}, None),
    "mpqa": ({"train": "mpqa/train.tsv", "test": "mpqa/dev.tsv"}, None),
    "conll2003": ({"train": "conll2003/train.txt", "validation": "conll2003/valid.txt"}, ["ner"]),
    "bshift": (None, None),
}
QUICK_TASKS = ("cr", "bshift")
QUICK_LIMIT = 200
"""--quick: the first examples of each split."""
QUICK_PLAN_EXAMPLES = 100
STANDARDIZED = "standardized"
BASES = ("pca", STANDARDIZED)
MAX_BYTES_A, MAX_BYTES_B = 0.30, 0.15
MAX_LOSS_B, MAX_GAP_C = 1.0, 2.0
QUICK_BYTES = {"tokens int8": 0.5, "tokens int4": 0.28}
BYTES_TOLERANCE = 0.02


def plan_head_epochs() -> int:
    """The epochs of ``plan``'s quick head: :func:`layercache.planning.plan_cache`'s default, read from its signature
    (the constant behind it is not public)."""
    import inspect

    from layercache.planning import plan_cache

    return int(inspect.signature(plan_cache).parameters["head_epochs"].default)


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat (``benchmarks/compare.py`` compares them): the run's and each task's seconds,
    each row's bytes over float16's, its measured probe loss and head loss (mean over the seeds), and target C's
    largest gap (points)."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"]}
    for task, result in results["tasks"].items():
        out[f"{task}_s"] = result["seconds"]
        for row in result["rows"]:
            key = f"{task}_{row['choice']}".replace(" + ", "_").replace(" ", "_").replace("(", "").replace(")", "")
            if row["bytes_vs_float16"] is not None:
                out[f"{key}_bytes_ratio"] = row["bytes_vs_float16"]
            if row["probe"]:
                out[f"{key}_probe_loss_points"] = row["probe"]["loss_points"]
            if row["head"]:
                out[f"{key}_head_loss_points"] = row["head"]["loss_mean"]
    gap = results["targets"]["C"]["max_probe_gap_points"]
    if gap is not None:
        out["max_probe_gap_points"] = gap
    return out


def log(text: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {text}", flush=True)


# --- the choices -------------------------------------------------------------------------------------------
def label(choice, basis: str) -> str:
    """The row's name: the choice's own (``tokens int8 + project 96``), `` (standardized)`` for that basis."""
    return choice.name + (f" ({STANDARDIZED})" if basis == STANDARDIZED else "")


def every_choice(width: int) -> list[tuple[object, str]]:
    """(StorageChoice, basis) of every row, in the table's order: full width, then each K (PCA, standardized)."""
    from layercache.extraction import StorageChoice

    rows = [(StorageChoice("tokens", dtype), "pca") for dtype in ("float16", "int8", "int4")]
    for k in (width // 2, width // 4, width // 8):
        for basis in BASES:
            rows += [(StorageChoice("tokens", dtype, k), basis) for dtype in ("int8", "int4")]
    rows.append((StorageChoice("pooled", "float16"), "pca"))
    return rows


def head_names(width: int) -> list[str]:
    """The rows a quick head is measured on: float16, int8, int4, int8 + project D/4 (both bases)."""
    k = width // 4
    return ["tokens float16", "tokens int8", "tokens int4", f"tokens int8 + project {k}",
            f"tokens int8 + project {k} ({STANDARDIZED})"]


# --- one task ----------------------------------------------------------------------------------------------
def split_files(task: str, data: Path, work: Path) -> tuple[dict[str, str], list[str] | None]:
    files, labels = TASKS[task]
    if files is None:
        import weak_signal

        written = weak_signal.write_task(task, work / "weak", data)
        return {split: str(path) for split, path in written.items()}, labels
    return {split: str(data / name) for split, name in files.items()}, labels


def priced_bytes(data_spec, work: Path) -> dict[str, int]:
    """Each standard choice's bytes on the full split plans, as ``plan`` prices them (no forward, no quality)."""
    from layercache.planning import plan_cache

    plan = plan_cache(MODEL, data_spec, quality_examples=0, sample_batches=0, disk_probe_bytes=1 << 20,
                      progress=False, out=work / "plan")
    return {row.name: row.bytes for row in plan.rows}


def run_check(sample, rows, heads, seed: int, head_epochs: int, folder: Path) -> dict[str, object]:
    """measure_quality once per basis: label -> ChoiceQuality, and each report's JSON and seconds."""
    from layercache.extraction import StorageSpec
    from layercache.planning import measure_quality

    measured, reports = {}, {}
    for basis in BASES:
        choices = [c for c, b in rows if b == basis and (basis == "pca" or c.project)]
        heads_here = [c for c, b in heads if b == basis]
        if not choices and not heads_here:
            continue
        where = folder / basis
        t0 = time.perf_counter()
        try:
            report = measure_quality(sample, choices, StorageSpec(project_basis=basis), heads=heads_here, seed=seed,
                                     head_epochs=head_epochs, folder=where)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        reports[basis] = {"seconds": round(time.perf_counter() - t0, 2), "report": report.to_json()}
        for quality in report.choices:
            measured[label(quality.choice, basis)] = quality
    return {"qualities": measured, "reports": reports}


def cost_json(cost) -> dict | None:
    return None if cost is None else cost.to_json()


def one_task(task: str, args, work: Path) -> dict:
    """Both measurements of ``task``: every row's bytes, losses and their comparison."""
    from layercache.extraction import BatchSpec, DataSpec, StorageSpec, load_inputs
    from layercache.planning import labelled_sample

    files, labels = split_files(task, args.data, work)
    full = DataSpec(dataset=None, split_files=files, label_columns=labels)
    data_spec = DataSpec(dataset=None, split_files=files, label_columns=labels,
                         limit=QUICK_LIMIT if args.quick else None)
    t_task = time.perf_counter()
    log(f"{task}: pricing the choices' bytes on the full splits")
    bytes_of = priced_bytes(full, work / task)
    log(f"{task}: loading the data and the model")
    inputs = load_inputs(MODEL, data_spec, StorageSpec(), BatchSpec(), allow_pickle=False)
    width = inputs.backbone.hidden_size
    rows = every_choice(width)
    picked = args.choices or (head_names(width) if args.quick else None)  # --quick: the heads' rows
    unknown = sorted(set(picked or ()) - {label(c, b) for c, b in rows})
    if unknown:
        raise SystemExit(f"--choices: no row called {', '.join(map(repr, unknown))}; the rows: "
                         + ", ".join(repr(label(c, b)) for c, b in rows))
    if picked:
        rows = [(c, b) for c, b in rows if label(c, b) in picked]
    names = [label(c, b) for c, b in rows]
    heads = [(c, b) for c, b in rows if label(c, b) in head_names(width)]
    result = {"files": files, "limit": data_spec.limit, "width": width,
              "splits": {n: {"examples": len(p.examples), "tokens": p.n_tokens} for n, p in inputs.plans.items()}}

    # 1. predicted: what plan measures, on its 2,000-example sample
    log(f"{task}: predicted: a sample of {args.plan_examples:,} examples, {len(rows)} choices, {len(heads)} heads")
    t0 = time.perf_counter()
    sample = labelled_sample(inputs, BatchSpec(), args.plan_examples, seed=0)
    if sample is None:
        raise SystemExit(f"{task}: too few labelled examples for a quality sample")
    predicted = run_check(sample, rows, heads, 0, args.head_epochs, work / task / "predicted")
    result["predicted"] = {"sample": sample.describe(), "cut": sample.cut,
                           "seconds": round(time.perf_counter() - t0, 2), "reports": predicted["reports"]}
    del sample
    gc.collect()

    # 2. measured: the whole data (up to --max-examples), each seed
    log(f"{task}: measured: a sample of up to {args.max_examples:,} examples, seeds {args.seeds}")
    t0 = time.perf_counter()
    sample = labelled_sample(inputs, BatchSpec(), args.max_examples, seed=0)
    if sample is None:
        raise SystemExit(f"{task}: too few labelled examples for a quality sample")
    log(f"{task}: measured sample: {sample.describe()} (forward {sample.forward.seconds:.0f}s)")
    by_seed = {}
    for n, seed in enumerate(args.seeds):
        t1 = time.perf_counter()
        by_seed[seed] = run_check(sample, rows if n == 0 else [], heads, seed, args.head_epochs,
                                  work / task / f"measured-{seed}")
        log(f"{task}: seed {seed}: {time.perf_counter() - t1:.0f}s")
    result["measured"] = {"sample": sample.describe(), "cut": sample.cut, "seeds": list(args.seeds),
                          "seconds": round(time.perf_counter() - t0, 2),
                          "reports": {str(s): r["reports"] for s, r in by_seed.items()}}
    del sample
    gc.collect()

    first = by_seed[args.seeds[0]]["qualities"]
    task_name = next((t for q in first.values() for t in q.probes), None)
    result["task"] = task_name
    f16_bytes, pooled_bytes = bytes_of.get("tokens float16"), bytes_of.get("pooled float16")

    def head_costs(name: str) -> list:
        """``name``'s head cost of each seed (where measured)."""
        return [by_seed[s]["qualities"][name].head[task_name] for s in args.seeds
                if name in by_seed[s]["qualities"] and task_name in by_seed[s]["qualities"][name].head]

    f16_scores = [100 * c.score for c in head_costs("tokens float16")]
    result["float16_head_scores"] = [round(x, 2) for x in f16_scores]
    result["float16_head_spread_points"] = round(max(f16_scores) - min(f16_scores), 2) if f16_scores else None
    table = []
    for (choice, basis), name in zip(rows, names):
        size = bytes_of.get(choice.name)
        probe = first[name].probes.get(task_name) if name in first else None
        pred_quality = predicted["qualities"].get(name)
        pred_probe = pred_quality.probes.get(task_name) if pred_quality else None
        pred_head = pred_quality.head.get(task_name) if pred_quality else None
        costs = head_costs(name)
        losses = [c.loss for c in costs]
        head = None if not losses else {
            "loss_mean": round(statistics.fmean(losses), 2), "loss_min": round(min(losses), 2),
            "loss_max": round(max(losses), 2), "losses": [round(x, 2) for x in losses],
            "score_mean_points": round(100 * statistics.fmean(c.score for c in costs), 2),
            "per_seed": [c.to_json() for c in costs]}
        states = None  # token states only: each cache less what the pooled-only cache takes (pooled vectors, metadata)
        if choice.store == "tokens" and size and f16_bytes and pooled_bytes:
            states = round((size - pooled_bytes) / (f16_bytes - pooled_bytes), 4)
        table.append({
            "choice": name, "store": choice.store, "dtype": choice.dtype, "project": choice.project, "basis": basis,
            "bytes": size, "bytes_vs_float16": None if not (size and f16_bytes) else round(size / f16_bytes, 4),
            "state_bytes_vs_float16": states,
            "probe": cost_json(probe), "head": head, "predicted_probe": cost_json(pred_probe),
            "predicted_head": cost_json(pred_head),
            "probe_gap_points": None if probe is None or pred_probe is None else
            round(abs(pred_probe.loss - probe.loss), 2),
            "head_gap_points": None if head is None or pred_head is None else
            round(abs(pred_head.loss - head["loss_mean"]), 2),
            "notes": list(first[name].notes) if name in first else []})
    result["rows"] = table
    result["seconds"] = round(time.perf_counter() - t_task, 1)
    result["loadavg"] = loadavg()
    return result


# --- output ------------------------------------------------------------------------------------------------
def interval(cost: dict | None) -> str:
    return "-" if cost is None else f"[{cost['interval_points'][0]:+.2f}, {cost['interval_points'][1]:+.2f}]"


def points(value) -> str:
    return "-" if value is None else f"{value:+.2f}"


def ratio_text(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_task(task: str, result: dict) -> None:
    rows = []
    for row in result["rows"]:
        probe, head, pred = row["probe"], row["head"], row["predicted_probe"]
        rows.append([row["choice"], ratio_text(row["bytes_vs_float16"]), ratio_text(row["state_bytes_vs_float16"]),
                     points(probe and probe["loss_points"]), interval(probe),
                     points(head and head["loss_mean"]),
                     "-" if head is None else f"{head['loss_min']:+.2f}..{head['loss_max']:+.2f}",
                     points(pred and pred["loss_points"]),
                     "-" if row["probe_gap_points"] is None else f"{row['probe_gap_points']:.2f}",
                     points(row["predicted_head"] and row["predicted_head"]["loss_points"])])
    metric = next((r["probe"]["metric"] for r in result["rows"] if r["probe"]), "?")
    spread = result["float16_head_spread_points"]
    print_table(f"{task} ({result['task']}, {metric}; losses in points against float32, positive = worse)",
                ["choice", "x f16", "states x f16", "probe", "probe 95%", "head", "head min..max", "pred probe",
                 "|pred-meas|", "pred head"], rows,
                note=f"x f16: the whole cache's bytes over float16's (plan's pricing); states: the token states only\n"
                     f"measured: {result['measured']['sample']}; seeds {result['measured']['seeds']}\n"
                     f"predicted: {result['predicted']['sample']}\n"
                     f"float16 head scores {result['float16_head_scores']} (spread {points(spread)} points); "
                     f"{result['seconds']:.0f}s")


def targets(results: dict) -> dict:
    """The issue's targets, judged on every task measured, by the whole cache's bytes (and, beside, by the token
    states' bytes alone: float16 pooled vectors put int4 over 0.30x of a short-sentence cache)."""
    tasks = results["tasks"]
    sequence = [t for t in tasks if tasks[t]["task"] is not None and t != "conll2003"]
    names = list(dict.fromkeys(r["choice"] for t in tasks for r in tasks[t]["rows"]))

    def row(task, name):
        return next((r for r in tasks[task]["rows"] if r["choice"] == name), None)

    def ratio(name, key):
        ratios = [row(t, name)[key] if row(t, name) else None for t in tasks]
        return None if not ratios or None in ratios else max(ratios)

    a, b = [], []
    for name in names:
        size, states = ratio(name, "bytes_vs_float16"), ratio(name, "state_bytes_vs_float16")
        smallest = min(x for x in (size, states, math.inf) if x is not None)
        if smallest <= MAX_BYTES_A:
            inside = {}
            for t, result in tasks.items():
                r, f16 = row(t, name), result["float16_head_scores"]
                inside[t] = bool(r and r["head"] and f16 and r["head"]["score_mean_points"] >= min(f16) - 1e-9)
            a.append({"choice": name, "bytes_vs_float16": size, "state_bytes_vs_float16": states,
                      "every_task": all(inside.values()), "tasks": inside})
        if smallest <= MAX_BYTES_B and sequence:
            within = {}
            for t in sequence:
                r = row(t, name)
                losses = [r["probe"]["loss_points"]] if r and r["probe"] else []
                if r and r["head"]:
                    losses.append(r["head"]["loss_mean"])
                within[t] = bool(losses) and max(losses) <= MAX_LOSS_B
            b.append({"choice": name, "bytes_vs_float16": size, "state_bytes_vs_float16": states,
                      "every_task": all(within.values()), "tasks": within})

    def met(found, limit, key):
        return any(x["every_task"] and x[key] is not None and x[key] <= limit for x in found)

    gaps = [(t, r["choice"], r["probe_gap_points"]) for t in tasks for r in tasks[t]["rows"]
            if r["probe_gap_points"] is not None]
    head_gaps = [r["head_gap_points"] for t in tasks for r in tasks[t]["rows"] if r["head_gap_points"] is not None]
    c = {"max_probe_gap_points": max((g for *_, g in gaps), default=None),
         "over_2_points": [{"task": t, "choice": n, "gap": g} for t, n, g in gaps if g > MAX_GAP_C],
         "met": bool(gaps) and all(g <= MAX_GAP_C for *_, g in gaps),
         "max_head_gap_points": max(head_gaps, default=None)}
    return {"A": {"met": met(a, MAX_BYTES_A, "bytes_vs_float16"),
                  "met_by_state_bytes": met(a, MAX_BYTES_A, "state_bytes_vs_float16"), "candidates": a},
            "B": {"met": met(b, MAX_BYTES_B, "bytes_vs_float16"),
                  "met_by_state_bytes": met(b, MAX_BYTES_B, "state_bytes_vs_float16"), "candidates": b,
                  "sequence_tasks": sequence},
            "C": c}


def print_targets(found: dict) -> None:
    rows = []
    for key, what in (("A", "A: head in float16's seed spread"), ("B", "B: within 1 point (sequence)")):
        for x in found[key]["candidates"]:
            failed = [t for t, ok in x["tasks"].items() if not ok]
            rows.append([what, x["choice"], ratio_text(x["bytes_vs_float16"]), ratio_text(x["state_bytes_vs_float16"]),
                         "yes" if x["every_task"] else "no: " + ", ".join(failed)])
    c = found["C"]
    over = ", ".join(f"{o['task']} {o['choice']} {o['gap']:.2f}" for o in c["over_2_points"])
    print_table("targets (A: <= 0.30x, B: <= 0.15x of float16's bytes)",
                ["target", "choice", "x f16", "states x f16", "every task"], rows,
                note=f"A met: {found['A']['met']} (by the token states' bytes: {found['A']['met_by_state_bytes']}); "
                     f"B met: {found['B']['met']} (by the states' bytes: {found['B']['met_by_state_bytes']})\n"
                     f"C (predicted probe loss within {MAX_GAP_C:g} points of measured, every task and choice): "
                     f"{c['met']}; largest gap {points(c['max_probe_gap_points'])}, heads' largest "
                     f"{points(c['max_head_gap_points'])}" + (f"\n  over {MAX_GAP_C:g} points: {over}" if over else ""))


def quick_checks(results: dict) -> list[str]:
    """What --quick asserts (nothing that depends on timing); the failures, as sentences."""
    failures = []
    for task, result in results["tasks"].items():
        for row in result["rows"]:
            costs = [row["probe"], row["predicted_probe"], row["predicted_head"]]
            costs += [*(row["head"]["per_seed"] if row["head"] else [])]
            for cost in filter(None, costs):
                low, high = cost["interval_points"]
                if not low - 0.01 <= cost["loss_points"] <= high + 0.01:
                    failures.append(f"{task} {row['choice']}: loss {cost['loss_points']} outside [{low}, {high}]")
            if row["choice"] == "tokens float16" and (row["probe"] is None or abs(row["probe"]["loss_points"]) > 1):
                failures.append(f"{task}: float16's probe loss {row['probe']} is not within 1 point of 0")
            want, got = QUICK_BYTES.get(row["choice"]), row["state_bytes_vs_float16"]
            if want is not None and (got is None or abs(got - want) > BYTES_TOLERANCE):
                failures.append(f"{task} {row['choice']}: its token states take {got}x of float16's bytes, not "
                                f"{want} +- {BYTES_TOLERANCE}")
    return failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--tasks", nargs="+", choices=list(TASKS), default=None,
                   help=f"default: all ({', '.join(TASKS)}); --quick: {' '.join(QUICK_TASKS)}")
    p.add_argument("--choices", nargs="+", default=None, metavar="NAME",
                   help="rows to measure, by name ('tokens int8', 'tokens int8 + project 96 (standardized)'); "
                        "default: all (--quick: the heads' rows)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="learners' seeds (default 0 1 2; --quick: 0)")
    p.add_argument("--max-examples", type=int, default=20000,
                   help="examples of the measured sample (learned on, and at most as many scored; default 20000)")
    p.add_argument("--plan-examples", type=int, default=None,
                   help=f"examples of the predicted (plan's) sample (default 2000; --quick: {QUICK_PLAN_EXAMPLES})")
    p.add_argument("--head-epochs", type=int, default=None, help="quick head epochs (default the plan's; --quick: 1)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "choice_quality.json")
    p.add_argument("--workdir", type=Path, default=None, help="where the sample caches go (default: a temp folder)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 small slices, 1 seed, 1 epoch; asserts")
    args = p.parse_args(argv)

    started = time.perf_counter()
    quiet_transformers()
    head_epochs_default = plan_head_epochs()

    args.data = args.data.expanduser().resolve()
    if not args.data.is_dir():
        print(f"No data folder at {args.data} (--data FOLDER): nothing measured.", file=sys.stderr)
        return 2
    args.tasks = args.tasks or list(QUICK_TASKS if args.quick else TASKS)
    args.seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    args.plan_examples = args.plan_examples or (QUICK_PLAN_EXAMPLES if args.quick else 2000)
    args.head_epochs = args.head_epochs or (1 if args.quick else head_epochs_default)
    if args.quick:
        args.max_examples = min(args.max_examples, QUICK_LIMIT)
    meta = {**machine_meta(args.quick, MODEL, "cpu"), "tasks": args.tasks, "seeds": args.seeds,
            "max_examples": args.max_examples, "plan_examples": args.plan_examples, "head_epochs": args.head_epochs,
            "choices": args.choices, "bytes_from": "plan_cache's priced rows (choice_bytes on the full split plans)"}
    results: dict = {"meta": meta, "tasks": {}}
    with work_folder(args.workdir, "choice-quality-") as work:
        for task in args.tasks:
            results["tasks"][task] = one_task(task, args, work)
            print_task(task, results["tasks"][task])
    results["targets"] = targets(results)
    print_targets(results["targets"])
    meta["total_s"] = time.perf_counter() - started
    meta["loadavg_end"] = loadavg()
    failures = quick_checks(results) if args.quick else []
    results["quick_failures"] = failures
    results["figures"] = figures(results)
    write_results(results, args.out)
    if failures:
        raise AssertionError("--quick: " + "; ".join(failures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
