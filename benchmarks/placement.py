"""What splitting a backbone over devices costs: ``extract --device-map auto`` against the whole model on one device.

MiniLM on the first ``--examples`` SST-2 training sentences, on the CPU, three placements measured side
by side in one process (after an untimed extraction of 8 sentences that pays the one-time costs; reps
interleaved, the order rotated each rep, so drift on a shared machine falls on every placement alike):

- ``whole``: the model on the CPU (``--device cpu``);
- ``cpu + disk``: ``--device-map auto --max-memory cpu=<limit>`` with the limit at ``--cpu-share`` (0.85) of the
  checkpoint's bytes: the first blocks stay in memory, the rest are offloaded to disk and read back block
  by block at every forward (accelerate's path for a model larger than every device);
- ``disk``: a limit so small that every block is offloaded.

For each: the ``extract()`` wall time, its ratio to ``whole``, the placement the manifest records, and
whether every shard's token states equal the whole model's (they must, bit for bit: the same
computation on the same device). On a GPU machine the same split spreads blocks over GPUs first; that
path is not measured here.

    python benchmarks/placement.py                  # 2000 sentences, 3 reps: a few minutes on 2 cores
    python benchmarks/placement.py --quick          # 64 sentences, 1 rep: under a minute

Everything runs on the CPU and disk (``extract()`` with ``device_map``/``max_memory``, the model's files found by
``layercache.backbone.resolve_model_source``, the states compared through ``LayerCache``), so ``--quick`` skips
nothing on a machine without a GPU; the multi-GPU split is not measured in either mode. Every run asserts what does
not depend on timing: each placement's cache holds the whole model's token states bit for bit, and the manifest
records the placement asked for (none for ``whole``, some modules on ``disk`` for the two offloaded ones).
Prints a table and writes JSON (default ``benchmarks/results/placement.json``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as extraction_bench  # noqa: E402
from _common import DEFAULT_DATA, HERE, loadavg, machine_meta, print_table, work_folder, write_results  # noqa: E402


def placements(checkpoint_bytes: int, cpu_share: float) -> dict[str, dict]:
    """Placement name -> ``extract()``'s device options."""
    return {"whole": {"device": "cpu"},
            "cpu + disk": {"device_map": "auto", "max_memory": {"cpu": int(checkpoint_bytes * cpu_share)}},
            "disk": {"device_map": "auto", "max_memory": {"cpu": 1 << 20}}}


def same_states(a: Path, b: Path) -> bool:
    """Whether cache ``b`` holds the token states of cache ``a``, bit for bit: every split, every example, every
    state, read through ``LayerCache.tokens`` (float32 of the same stored values)."""
    import numpy as np

    from layercache import LayerCache

    x, y = LayerCache.open(a), LayerCache.open(b)
    try:
        if x.splits != y.splits or x.layer_names != y.layer_names:
            return False
        for split in x.splits:
            n = x.num_examples(split)
            if n != y.num_examples(split) or not np.array_equal(x.lengths(split), y.lengths(split)):
                return False
            for start in range(0, n, 256):
                rows = list(range(start, min(start + 256, n)))
                if not all(np.array_equal(np.asarray(p), np.asarray(q))
                           for p, q in zip(x.tokens(split, rows), y.tokens(split, rows))):
                    return False
        return bool(x.splits)
    finally:
        x.close()
        y.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--examples", type=int, default=None,
                   help="first N SST-2 training sentences (default 2000; --quick 64)")
    p.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 3; --quick 1)")
    p.add_argument("--quick", action="store_true", help="64 sentences, 1 rep, with the checks: under a minute")
    p.add_argument("--cpu-share", type=float, default=0.85,
                   help="the cpu + disk limit as a share of the checkpoint's bytes (default 0.85: half the blocks "
                        "on disk)")
    p.add_argument("--out", type=Path, default=HERE / "results" / "placement.json")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    args.examples = args.examples or (64 if args.quick else 2000)
    args.reps = args.reps or (1 if args.quick else 3)
    started = time.perf_counter()

    import layercache
    from layercache.backbone import resolve_model_source

    checkpoint = Path(resolve_model_source("minilm")) / "model.safetensors"
    variants = placements(checkpoint.stat().st_size, args.cpu_share)
    files, _ = extraction_bench.split_files(args.data.expanduser().resolve(), "sst2")
    times: dict[str, list[float]] = {name: [] for name in variants}
    recorded: dict[str, dict | None] = {}
    equal: dict[str, bool] = {}
    with work_folder(args.workdir, "placement-bench-") as workdir:
        names = list(variants)
        # untimed: imports, the model's files in the page cache and one-time setup fall on no placement
        layercache.extract("minilm", None, workdir / "warmup", split_files=files, limit=8, storage_dtype="float16",
                           progress=False, quality_examples=0, device="cpu")
        for rep in range(args.reps):
            order = names[rep % len(names):] + names[:rep % len(names)]  # rotated: drift falls on every one
            for name in order:
                out = workdir / f"{name.replace(' ', '').replace('+', '-')}-{rep}"
                t0 = time.perf_counter()
                result = layercache.extract("minilm", None, out, split_files=files, limit=args.examples,
                                            storage_dtype="float16", progress=False, quality_examples=0,
                                            **variants[name])
                times[name].append(time.perf_counter() - t0)
                recorded[name] = result.manifest.model.placement
                print(f"  rep {rep} {name}: {times[name][-1]:.1f} s", flush=True)
        for name in names:
            equal[name] = same_states(workdir / "whole-0", workdir / f"{name.replace(' ', '').replace('+', '-')}-0")
    whole = statistics.median(times["whole"])
    rows = [[name, statistics.median(times[name]), statistics.median(times[name]) / whole,
             str(recorded[name] or "-"), "yes" if equal[name] else "NO"] for name in variants]
    print_table(f"extract() of {args.examples} SST-2 sentences with MiniLM on the CPU, by placement "
                f"(median of {args.reps})", ["placement", "wall s", "x whole", "modules per device", "same states"],
                rows, note="cpu + disk and disk read offloaded blocks back from disk at every forward pass.")
    checks = {f"{name}: same states as whole": equal[name] for name in names}
    checks["whole: no placement recorded"] = not recorded["whole"]
    checks.update({f"{name}: modules on disk recorded": bool((recorded[name] or {}).get("disk"))
                   for name in names if name != "whole"})
    print_table("Checks (independent of timing)", ["check", "holds"], [[k, v] for k, v in checks.items()])
    results = {"meta": {**machine_meta(args.quick, "minilm", "cpu"), "loadavg_end": loadavg(),
                        "total_s": time.perf_counter() - started, "examples": args.examples, "reps": args.reps,
                        "cpu_share": args.cpu_share},
               "placements": {name: {"seconds": times[name], "median_s": statistics.median(times[name]),
                                     "ratio_to_whole": statistics.median(times[name]) / whole,
                                     "placement": recorded[name], "same_states": equal[name],
                                     "options": {k: v for k, v in variants[name].items()}}
                              for name in variants},
               "checks": checks,
               "figures": {**{f"{key(name)}_s": statistics.median(times[name]) for name in variants},
                           **{f"{key(name)}_to_whole_ratio": statistics.median(times[name]) / whole
                              for name in variants if name != "whole"}}}
    write_results(results, args.out)
    failed = [k for k, ok in checks.items() if not ok]
    assert not failed, f"placement checks failed: {failed}"
    return 0


def key(name: str) -> str:
    """A placement's name as a figure's (``cpu + disk`` -> ``cpu_disk``)."""
    return name.replace(" + ", "_")


if __name__ == "__main__":
    raise SystemExit(main())
