"""What compressed storage costs in time: extraction ÷ bare forward, and a head's epoch, per storage choice.

MiniLM (CPU) on the first ``--examples`` SST-2 training sentences, for float16, int8, int8 +
``--project K``, int4 and int4 + ``--project K`` storage (``--variants`` picks some), measured side by
side in one process (reps interleaved, the order rotated each rep, so drift on a shared machine falls
on every variant alike):

1. extraction: ``layercache.extraction.extract_loaded``'s wall time (the extraction of data and a backbone
   ``load_inputs`` loaded once: no data load, model load or tokenizing) over a bare forward pass of the same
   planned batches (``benchmarks/extract.py``'s two passes, on the public API; the quality check
   ``layercache.extract`` runs after a lossy extraction is not extraction, and not in it); target: int8's ratio
   within 5 % of float16's.
2. a head's epoch: the default ``adaptive`` head trained from each cache (same seed, one torch
   thread), the median of its epochs' wall times, ``--head-reps`` times, the variants' fits
   interleaved and rotated as the extractions are; each rep's epoch is divided by float16's of the
   same rep, and the median of those ratios is reported; target: int8 and int4 no slower than float16.

Run ``python benchmarks/storage_speed.py`` (a few minutes on 2 idle cores), or ``--quick`` (100 sentences,
``--project 32``, one rep, 2 head epochs, one head rep: under a minute), which asserts what does not depend on
timing: every cache holds the same examples and tokens; int8 takes about half of float16's bytes and int4 about
0.28x (the shards' bytes: float16 pooled vectors, ids and metadata, which do not shrink, may add up to
``BYTES_ABOVE``), a projected cache less than its full-width one, and ``estimate_bytes`` is within 3 % (or 64 KiB)
of the bytes on disk it counts (``benchmarks/extract.py``'s check). Prints a table and writes JSON (default
``benchmarks/results/storage_speed.json``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as extraction_bench  # noqa: E402
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, print_table, work_folder, write_results  # noqa: E402


def variants(project: int, picked: list[str] | None = None) -> dict[str, dict]:
    """Storage variant name -> extract()'s storage options; ``picked``: those of :data:`VARIANTS` (float16 always)."""
    every = {"float16": {"storage_dtype": "float16"}, "int8": {"storage_dtype": "int8"},
             "int8+project": {"storage_dtype": "int8", "project": project}, "int4": {"storage_dtype": "int4"},
             "int4+project": {"storage_dtype": "int4", "project": project}}
    return {key.replace("+project", f" + project {project}"): options for key, options in every.items()
            if picked is None or key == "float16" or key in picked}


VARIANTS = ("int8", "int8+project", "int4", "int4+project")
"""What ``--variants`` takes (float16, the reference, is always measured)."""
BYTES = {"int8": 0.5, "int4": 0.28}
"""--quick: each full-width variant's shard bytes over float16's, at least (the token states' share of them)."""
BYTES_ABOVE = 0.07


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--examples", type=int, default=None,
                   help="first N SST-2 training sentences (default 4000; --quick 100)")
    p.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 3; --quick 1)")
    p.add_argument("--project", type=int, default=None, help="K of the projected variant (default 96 = D/4; "
                   "--quick 32)")
    p.add_argument("--epochs", type=int, default=None, help="head epochs per cache (default 4; --quick 2)")
    p.add_argument("--head-reps", type=int, default=None,
                   help="interleaved head fits per cache (default 3; --quick 1)")
    p.add_argument("--variants", nargs="+", default=None, choices=VARIANTS,
                   help="storage variants to measure beside float16 (default: all)")
    p.add_argument("--quick", action="store_true", help="a small run with checks: under a minute")
    p.add_argument("--out", type=Path, default=HERE / "results" / "storage_speed.json")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    quick = args.quick
    args.examples = args.examples or (100 if quick else 4000)
    args.reps = args.reps or (1 if quick else 3)
    args.project = args.project or (32 if quick else 96)
    args.epochs = args.epochs or (2 if quick else 4)
    args.head_reps = args.head_reps or (1 if quick else 3)

    import torch

    import layercache as lc

    started = time.perf_counter()
    files, split = extraction_bench.split_files(args.data.expanduser().resolve(), "sst2")
    kinds = variants(args.project, args.variants)
    meta = {**machine_meta(quick, extraction_bench.MODEL, "cpu"), "examples": args.examples, "reps": args.reps,
            "project": args.project, "epochs": args.epochs, "head_reps": args.head_reps,
            "threads": torch.get_num_threads()}
    results: dict = {"meta": meta, "extraction": {}, "head_epoch": {}}
    with work_folder(args.workdir, "storage-speed-") as work:
        inputs, meta["load_inputs_s"] = extraction_bench.load(files, args.examples)
        extraction_bench.warmup(inputs, split)
        bares, loops, counts = [], {name: [] for name in kinds}, {name: [] for name in kinds}
        for rep in range(args.reps):
            names = list(kinds)
            names = names[rep % len(names):] + names[:rep % len(names)]  # rotate the order each rep
            bares.append(extraction_bench.bare_pass(inputs, split)["forward_s"])
            for name in names:
                out = work / f"{name.replace(' ', '_')}-{rep}"
                timing, result = extraction_bench.extract_loaded_pass(inputs, out, kinds[name])
                loops[name].append(timing["loop_s"])
                counts[name].append(extraction_bench.split_counts(result, split))
                if rep < args.reps - 1:
                    shutil.rmtree(out, ignore_errors=True)
            print(f"rep {rep + 1}/{args.reps}: bare {bares[-1]:.1f}s, "
                  + ", ".join(f"{n} {loops[n][-1]:.1f}s" for n in kinds) + f"; load avg {loadavg()}", flush=True)
        del inputs
        bare = statistics.median(bares)
        for name in kinds:
            results["extraction"][name] = {"loop_s": loops[name], "bare_forward_s": bares,
                                           "ratio": statistics.median(loops[name]) / bare, "counts": counts[name]}
        # Head epochs, from the last rep's caches: one fit per variant and rep, the variants interleaved and their
        # order rotated each rep, so a busy spell on a shared machine falls on every variant alike.
        lc.use_threads(1)  # kept by every computing call, even at torch's default count
        last = {name: work / f"{name.replace(' ', '_')}-{args.reps - 1}" for name in kinds}
        fits = {name: [] for name in kinds}  # name -> per rep (median epoch s, fit s, accuracy)
        for rep in range(args.head_reps):
            names = list(kinds)
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                cache = lc.LayerCache.open(last[name])
                t = time.perf_counter()
                head = lc.LayerHead(mixer="adaptive", epochs=args.epochs, seed=0, progress=False).fit(cache)
                wall = time.perf_counter() - t
                epochs = [e.seconds for e in head.history_.epochs]
                metrics, _ = head.evaluate(cache, split)
                fits[name].append((statistics.median(epochs), wall, metrics[head.tasks_[0].name].get("accuracy")))
                cache.close()
            print(f"head rep {rep + 1}/{args.head_reps}: " + ", ".join(f"{n} {fits[n][-1][0]:.2f}s" for n in kinds)
                  + f"; load avg {loadavg()}", flush=True)
        for name, path in last.items():
            medians = [f[0] for f in fits[name]]
            ratios = [m / f[0] for m, f in zip(medians, fits["float16"])]  # against float16's epoch of the same rep
            size = extraction_bench.cache_size(path)
            results["head_epoch"][name] = {"median_epoch_s_by_rep": medians,
                                           "median_epoch_s": statistics.median(medians),
                                           "ratio_by_rep": ratios, "ratio": statistics.median(ratios),
                                           "fit_s": [f[1] for f in fits[name]],
                                           "bytes": size["bytes_apparent"], "shard_bytes": size["shard_bytes"],
                                           "estimate_over_counted": size["estimate_over_counted"],
                                           "estimate_ok": extraction_bench.estimate_ok(size),
                                           "train_accuracy": fits[name][-1][2]}
    meta["total_s"] = time.perf_counter() - started
    base = results["extraction"]["float16"]["ratio"]
    f16_bytes = results["head_epoch"]["float16"]["bytes"]
    rows = []
    for name in kinds:
        extracted, epoch = results["extraction"][name], results["head_epoch"][name]
        rows.append([name, f"{epoch['bytes'] / 2**20:.1f} MiB", f"{epoch['bytes'] / f16_bytes:.3f}",
                     f"{extracted['ratio']:.3f}", f"{extracted['ratio'] / base:.3f}",
                     f"{epoch['median_epoch_s']:.2f}", f"{epoch['ratio']:.3f}"])
    print_table("storage choices, side by side", ["storage", "cache", "x float16", "extract / forward", "vs float16",
                                                  "head epoch (s)", "vs float16"], rows,
                note="extract = extract_loaded of inputs loaded once (load_inputs); forward = a bare forward of the "
                     "same planned batches")
    results["figures"] = figures(results)
    failures = quick_checks(results) if quick else []
    results["quick_failures"] = failures
    write_results(results, args.out)
    if failures:
        raise AssertionError("--quick: " + "; ".join(failures))
    return 0


def key(name: str) -> str:
    """A variant's name as a figure's (``int8 + project 96`` -> ``int8_project_96``)."""
    return name.replace(" + ", "_").replace(" ", "_")


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat, for ``benchmarks/compare.py``: each variant's extraction over the bare forward
    and over float16's, its head epoch and that over float16's, its bytes over float16's."""
    out: dict[str, float] = {"total_s": results["meta"]["total_s"],
                             "bare_forward_s": statistics.median(results["extraction"]["float16"]["bare_forward_s"])}
    base = results["extraction"]["float16"]["ratio"]
    f16_bytes = results["head_epoch"]["float16"]["bytes"]
    for name, extracted in results["extraction"].items():
        epoch = results["head_epoch"][name]
        out.update({f"{key(name)}_extract_s": statistics.median(extracted["loop_s"]),
                    f"{key(name)}_extract_to_forward_ratio": extracted["ratio"],
                    f"{key(name)}_head_epoch_s": epoch["median_epoch_s"]})
        if name != "float16":
            out.update({f"{key(name)}_extract_to_float16_ratio": extracted["ratio"] / base,
                        f"{key(name)}_head_epoch_to_float16_ratio": epoch["ratio"],
                        f"{key(name)}_bytes_to_float16_ratio": epoch["bytes"] / f16_bytes})
    return out


def quick_checks(results: dict) -> list[str]:
    """What --quick asserts (nothing that depends on timing); the failures, as sentences."""
    failures = []
    reference = results["extraction"]["float16"]["counts"][0]
    f16_shards = results["head_epoch"]["float16"]["shard_bytes"]
    for name, extracted in results["extraction"].items():
        if any(c != reference for c in extracted["counts"]):
            failures.append(f"{name}: its cache holds {extracted['counts']}, float16's {reference}")
        epoch = results["head_epoch"][name]
        if not epoch["estimate_ok"]:
            failures.append(f"{name}: estimate_bytes is {epoch['estimate_over_counted']:.3f}x the bytes on disk it "
                            "counts")
        dtype, _, projected = name.partition(" + ")
        ratio = epoch["shard_bytes"] / f16_shards
        if not projected and dtype in BYTES and not BYTES[dtype] - 0.01 <= ratio <= BYTES[dtype] + BYTES_ABOVE:
            failures.append(f"{name}: shards of {ratio:.3f}x float16's bytes, not {BYTES[dtype]} to "
                            f"{BYTES[dtype] + BYTES_ABOVE}")
        full = results["head_epoch"].get(dtype)
        if projected and full and not epoch["shard_bytes"] < full["shard_bytes"]:
            failures.append(f"{name}: {epoch['shard_bytes']:,} shard bytes, not less than {dtype}'s "
                            f"{full['shard_bytes']:,}")
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
