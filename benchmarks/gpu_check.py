"""The checks a machine with a GPU runs: a split model's cache equals the whole model's, GPU states agree with the
CPU's, the feed and a head run on the GPU (the int8 feed's speed against float16's), extraction's throughput against a
bare forward, a cache-trained head's live predictions against the cache's and its warm throughput, and the tuned lens.

MiniLM over the first ``--examples`` SST-2 training sentences (or the built-in data), through the public API only:

1. ``cuda float32`` against ``cpu float32``: the token states of the same examples, extracted on each device
   with a float32 forward (``dtype="float32"``, ``storage_dtype="float32"``); the largest difference relative to
   each state's scale (different kernels: close, not equal);
2. the split: ``device_map="auto"`` with ``max_memory`` holding about half the checkpoint on the GPU and the
   rest in CPU memory, against the whole model on the GPU: the stored float16 states bit for bit (the same
   computation on the same device: the offloaded blocks are brought to the GPU to run), and the placement the
   manifest records;
3. reads: one shuffled epoch of the feed of a float16 and an int8 cache, read and dequantised where the head
   trains (``LayerHead(device="cuda")``, 1 epoch, the default adaptive head), median of ``--reps``, and the
   head's validation score on both;
4. the tuned lens on the device: a random decoder of SmolLM-135M's shape (30 x 576, vocabulary 49,152, over 16,384
   tokens; a 3 x 64 one of 2,048 over 256 in ``--quick`` or without a GPU, as ``benchmarks/lens.py --quick`` times it:
   ``LENS_SHAPES``), one epoch of the KL fit (``TunedLens(device=...)``) with float32 logits and with bfloat16
   logits, each against its matmul bound at the device's measured rate on the logits' two shapes in its dtype
   (``benchmarks/lens.py``'s accounting); then the two lenses scored in float32 on those tokens, and the float32 lens
   with bfloat16 logits: the largest per-layer difference of KL of each from the float32 lens's float32 scores,
   which fails beyond ``LENS_KL_TOLERANCE``;
5. extraction: the backbone loaded once on the device (``load_inputs``), a bare forward of the planned batches
   (``Backbone.hidden_states``) against extraction's loop (``extract_loaded``) over the same batches in bfloat16
   (float32 without a GPU), storing float16, int8, and int8 projected to a quarter of the width: real tokens a
   second of each, and each loop's time over the bare forward's;
6. live: a head trained from the whole model's cache on the device (3 epochs), attached to the backbone there
   (``LiveBundle.from_runs``): its live predictions against the cache's (``layercache.live.parity``, failing below
   ``benchmarks/live.py``'s ``MIN_AGREEMENT``, 99 %), and warm ``predict`` throughput (texts a second, batches of
   32, after a warm-up batch) against a bare forward of the same texts.

    python benchmarks/gpu_check.py                 # on a machine with a GPU: a few minutes (never run on one yet)
    python benchmarks/gpu_check.py --quick         # 64 sentences; without a GPU every step runs on the CPU
    python benchmarks/gpu_check.py --only lens     # one step (states, split, reads, extraction, live, lens;
                                                   # repeatable)

Without a GPU the same steps run on the CPU (the split goes to CPU memory and disk), so the script stays
runnable and checked in CI; the JSON says which device ran (``meta.device``). Exits 1 when a check fails.
Writes ``results/gpu_check.json``.
"""

from __future__ import annotations

import argparse
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
STEPS = ("states", "split", "reads", "extraction", "live", "lens")
"""The checks, in the order they run (``--only`` picks some)."""
MAX_RELATIVE = 1e-3
"""Largest GPU-against-CPU difference of a float32 state, relative to the state's largest value, accepted."""
LENS_SHAPES = {"full": (30, 576, 49152, 16384, 1024), "quick": (3, 64, 2048, 256, 64)}
"""The lens step's random decoder and fit: (layers, width, vocabulary, tokens, tokens per minibatch); ``full`` on a
GPU (tokens and minibatches larger than the CPU benchmark's, so that a GPU's kernels are not all launch cost)."""
PREDICT_TEXTS = {"full": 512, "quick": 64}
"""Validation texts the live step's throughput is timed over."""
LENS_KL_TOLERANCE = 1e-3
"""nats: the largest per-layer KL difference between bfloat16 and float32 logits accepted, in scoring or in the fit
(measured on CPU, at most 5.4e-4 on the tiny decoders of tests/depth/test_lens_devices.py and 1.9e-5 on the GPT-2 of
benchmarks/lens.py; see benchmarks/README.md, Tuned lens)."""


def extract(out: Path, files: dict, limit: int, **options):
    import layercache as lc

    return lc.extract(MODEL, None, out, split_files=files, limit=limit, progress=False, quality_examples=0,
                      overwrite=True, **options)


def states(path: Path, split: str = "train"):
    """(tokens, states, D) float32 token states of every example of ``split``, in cache order."""
    import numpy as np

    import layercache as lc

    with lc.LayerCache.open(path) as cache:
        return np.concatenate(cache.tokens(split, rows=list(range(cache.num_examples(split))))), \
            cache.manifest.model.placement


def lens_step(data: Path, folder: Path, device: str, *, quick: bool) -> tuple[dict, list[str]]:
    """Step 4 (see the module): the lens's figures, and its failures."""
    import numpy as np
    from lens import matmul_rates, random_decoder_cache, timed_fit

    layers, width, vocab, tokens, batch = LENS_SHAPES["full" if device == "cuda" and not quick else "quick"]
    cache, extract_s = random_decoder_cache(data, folder, layers, width, vocab, tokens, device=device)
    checks: dict = {"lens_shape": f"{layers} x {width}, vocabulary {vocab}", "lens_extract_s": extract_s}
    lenses = {}
    for dtype in ("float32", "bfloat16"):
        rates = matmul_rates(batch, width, vocab, device=device, dtype=dtype)
        lenses[dtype], fit = timed_fit(cache, rates, tokens=tokens, batch_tokens=batch, device=device,
                                       logits_dtype=dtype)
        checks.update({f"lens_{dtype}_fit_s": fit["fit_s"], f"lens_{dtype}_bound_s": fit["bound_s"],
                       f"lens_{dtype}_bound_ratio": fit["bound_ratio"],
                       f"lens_{dtype}_forward_gflops": rates["forward"],
                       f"lens_{dtype}_backward_gflops": rates["backward"]})
    checks["lens_tokens"] = lenses["float32"].n_tokens_
    exact = lenses["float32"].score(cache, "train")["tuned"].kl  # (S,) the reference: float32 fit, float32 scores
    fitted_bf16 = lenses["bfloat16"].set_params(logits_dtype="float32").score(cache, "train")["tuned"].kl
    scored_bf16 = lenses["float32"].set_params(logits_dtype="bfloat16").score(cache, "train")["tuned"].kl
    checks["lens_mean_kl"] = float(np.mean(exact[:-1]))
    checks["lens_bf16_fit_kl_max_diff"] = float(np.abs(fitted_bf16 - exact).max())
    checks["lens_bf16_score_kl_max_diff"] = float(np.abs(scored_bf16 - exact).max())
    said = {"lens_bf16_fit_kl_max_diff": "a lens fitted with bfloat16 logits has a KL {:.2e} nats from the float32 "
                                         "lens's at a layer",
            "lens_bf16_score_kl_max_diff": "bfloat16 logits move the float32 lens's KL by {:.2e} nats at a layer"}
    failures = [f"{sentence.format(checks[key])} (tolerance {LENS_KL_TOLERANCE:.0e})" for key, sentence in said.items()
                if not checks[key] <= LENS_KL_TOLERANCE]
    return checks, failures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="64 sentences, 1 rep")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--only", action="append", choices=STEPS, default=None,
                   help="run only these steps (repeatable; default: all): a lent GPU's minutes are few")
    p.add_argument("--json", type=Path, default=HERE / "results" / "gpu_check.json")
    args = p.parse_args(argv)
    steps = set(args.only or STEPS)
    if args.quick:
        args.examples, args.reps = 64, 1
    quiet_transformers()
    import torch


    gpu = "cuda" if torch.cuda.is_available() else "cpu"
    files = {"train": str(args.data / "sst2" / "train.tsv"), "validation": str(args.data / "sst2" / "dev.tsv")}
    missing = [f for f in files.values() if not Path(f).is_file()]
    if missing:  # before a device's minutes go to loading anything
        sys.exit(f"benchmarks/gpu_check.py: benchmark data not found: {', '.join(missing)}; pass --data FOLDER "
                 "holding sst2/{train,dev}.tsv.")
    results = {"meta": machine_meta(args.quick, MODEL, gpu), "checks": {}}
    if gpu == "cuda":
        results["meta"]["gpu"] = torch.cuda.get_device_name(0)
    failures: list[str] = []
    started = time.perf_counter()
    with work_folder(args.workdir, "gpu-check-") as work:
        if "states" in steps:  # 1. the GPU's float32 states against the CPU's
            states_step(work, files, args.examples, gpu, results, failures)
        if steps & {"split", "reads", "live"}:  # the whole model's cache on the device: what these steps use
            whole = extract(work / "whole", files, args.examples, device=gpu)
        if "split" in steps:  # 2. the split against the whole model on the same device
            split_step(work, files, args.examples, gpu, whole.path, results, failures)
        if "reads" in steps:  # 3. the feed and a head where the head trains: int8 against float16
            reads_step(work, files, args.examples, gpu, whole.path, args.reps, results)
        if "extraction" in steps:  # 5. extraction's loop against a bare forward, three storages
            extraction_step(work, files, args.examples, gpu, results, failures)
        if "live" in steps:  # 6. a head from the cache on the live backbone: parity, warm predict throughput
            live_step(work, files, gpu, whole.path, PREDICT_TEXTS["quick" if args.quick else "full"], results,
                      failures)
        if "lens" in steps:  # 4. the tuned lens's fit and scores on the device, float32 and bfloat16 logits
            lens_checks, lens_failures = lens_step(args.data, work / "lens", gpu, quick=args.quick)
            results["checks"].update(lens_checks)
            failures += lens_failures
    results["figures"] = {k: float(v) for k, v in results["checks"].items() if isinstance(v, (int, float, bool))}
    # compare.py reads each figure as lower-is-better unless told: a pass, a score and a token count are not
    results["figure_directions"] = {k: direction for k in results["figures"] if (direction := figure_direction(k))}
    results["failures"] = failures
    results["meta"].update(total_s=round(time.perf_counter() - started, 1), loadavg_end=loadavg(), steps=sorted(steps))
    print_table(f"GPU checks ({gpu}{', ' + results['meta'].get('gpu', '') if gpu == 'cuda' else ''})",
                ["check", "value"], [[k, v] for k, v in results["checks"].items()],
                note="; ".join(failures) or "every check passed")
    write_results(results, args.json)
    return 1 if failures else 0


def figure_direction(name: str) -> str | None:
    """How ``benchmarks/compare.py`` reads a figure other than seconds or a ratio of seconds (None: lower is
    better): a pass, a score, an agreement and a throughput are higher when better, a token count just differs."""
    if name == "split_equals_whole" or name.endswith(("_validation_score", "_agreement", "_per_s")):
        return "higher"
    return "either" if name in ("lens_tokens", "extraction_real_tokens", "live_texts") else None


def extraction_step(work: Path, files: dict, examples: int, gpu: str, results: dict, failures: list[str]) -> None:
    """5. Extraction's loop on the device against a bare forward of the same batches, for three storages."""
    import dataclasses

    from extract import bare_pass, batching, load, warmup
    from lens import synchronize

    from layercache.extraction import StorageSpec, extract_loaded

    dtype = "bfloat16" if gpu == "cuda" else "float32"  # a CPU without bfloat16 units multiplies it slowly
    inputs, _ = load({"train": files["train"]}, examples, device=gpu, dtype=dtype)
    spec = dataclasses.replace(batching(), device=gpu, dtype=dtype)  # the batches load() planned, on the device
    warmup(inputs, "train")
    synchronize(gpu)
    t0 = time.perf_counter()
    bare = bare_pass(inputs, "train")
    synchronize(gpu)
    bare_s = time.perf_counter() - t0
    tokens = bare["real_tokens"]
    checks = results["checks"]
    checks.update(extraction_dtype=dtype, extraction_real_tokens=tokens,
                  extraction_bare_tokens_per_s=tokens / bare_s)
    width = inputs.backbone.hidden_size
    storages = {"float16": {"storage_dtype": "float16"}, "int8": {"storage_dtype": "int8"},
                f"int8_p{width // 4}": {"storage_dtype": "int8", "project": width // 4}}
    for name, storage in storages.items():
        t0 = time.perf_counter()
        result = extract_loaded(inputs, work / f"extract-{name}", StorageSpec(**storage), batching=spec,
                                overwrite=True)
        loop_s = time.perf_counter() - t0
        stored = result.manifest.splits["train"].n_tokens
        if stored != tokens:
            failures.append(f"the {name} cache stores {stored} tokens where the bare forward ran {tokens}")
        checks[f"extraction_{name}_tokens_per_s"] = tokens / loop_s
        checks[f"extraction_{name}_over_bare_ratio"] = loop_s / bare_s


def live_step(work: Path, files: dict, gpu: str, whole: Path, n_texts: int, results: dict,
              failures: list[str]) -> None:
    """6. A head from the whole model's cache, live on the device: parity with the cache, warm predict throughput."""
    from lens import synchronize
    from live import MIN_AGREEMENT, throughput

    import layercache as lc
    from layercache.sources import load_dataset_records

    with lc.LayerCache.open(whole) as cache:
        run = lc.train_head(cache, "adaptive", out=work / "live-run", overwrite=True, epochs=3, seed=0, device=gpu,
                            progress=False).run
        bundle = lc.LiveBundle.from_runs([run], device=gpu)
        agreement = lc.live.parity(run, cache, "validation", backbone=bundle.backbone)
    checks = results["checks"]
    checks["live_parity_agreement"] = agreement.agreement
    if not agreement.agreement >= MIN_AGREEMENT:
        failures.append(f"live and cache predictions agree on {agreement.agreement:.4f} of the validation examples "
                        f"(< {MIN_AGREEMENT})")
    texts = load_dataset_records(None, split_files={"validation": files["validation"]}
                                 ).splits["validation"].texts[:n_texts]
    backbone, tokenizer = bundle.backbone, bundle.backbone.tokenizer

    def bare(batch):
        encoded = tokenizer(list(batch), truncation=True, max_length=bundle.max_length, padding=True,
                            return_tensors="pt")
        backbone.hidden_states(encoded["input_ids"], encoded["attention_mask"])
        synchronize(gpu)

    checks["live_texts"] = len(texts)
    checks["live_bare_texts_per_s"] = throughput(bare, texts)
    checks["live_predict_texts_per_s"] = throughput(lambda batch: bundle.predict(batch), texts)
    checks["live_predict_over_bare_ratio"] = checks["live_bare_texts_per_s"] / checks["live_predict_texts_per_s"]


def states_step(work: Path, files: dict, examples: int, gpu: str, results: dict, failures: list[str]) -> None:
    """1. float32 states extracted on the device against the CPU's, relative to each state's scale."""
    import numpy as np

    on_cpu = extract(work / "cpu32", files, examples, device="cpu", dtype="float32", storage_dtype="float32")
    on_gpu = extract(work / "gpu32", files, examples, device=gpu, dtype="float32", storage_dtype="float32")
    a, b = states(on_cpu.path)[0], states(on_gpu.path)[0]
    scale = np.abs(a).max(axis=(0, 2), keepdims=True)  # (1, S, 1) each state's largest value
    relative = float(np.abs(a - b).max() / scale.min()) if a.shape == b.shape else float("inf")
    results["checks"]["gpu_vs_cpu_relative"] = relative
    if not relative <= MAX_RELATIVE:
        failures.append(f"{gpu} float32 states differ from the CPU's by {relative:.2e} of a state's scale")


def split_step(work: Path, files: dict, examples: int, gpu: str, whole: Path, results: dict,
               failures: list[str]) -> None:
    """2. ``device_map="auto"`` over the device and CPU memory (or memory and disk) against the whole model."""
    import numpy as np

    from layercache import backbone

    weights = sum(f.stat().st_size for f in backbone.weight_files(backbone.resolve_model_source(MODEL)))
    # about half the checkpoint on the GPU, the rest in CPU memory (without a GPU: most in memory, the rest on disk)
    budget = {"cuda:0": weights // 2, "cpu": weights * 4} if gpu == "cuda" else {"cpu": int(weights * 0.85)}
    split = extract(work / "split", files, examples, device_map="auto", max_memory=budget)
    (x, _), (y, placement) = states(whole), states(split.path)
    equal = x.shape == y.shape and bool(np.array_equal(x, y))
    results["checks"]["split_equals_whole"] = equal
    results["checks"]["split_placement"] = placement
    if not equal:
        failures.append("the split model's cache differs from the whole model's")
    if not placement:
        failures.append("the split's manifest records no placement")


def reads_step(work: Path, files: dict, examples: int, gpu: str, whole: Path, reps: int, results: dict) -> None:
    """3. One epoch of the default head on the device from a float16 and an int8 cache: the feed's speed, the score."""

    import layercache as lc

    int8 = extract(work / "int8", files, examples, device=gpu, storage_dtype="int8")
    epochs = {"float16": [], "int8": []}
    scores = {}
    for _ in range(reps):
        for name, path in (("float16", whole), ("int8", int8.path)):
            with lc.LayerCache.open(path) as cache:
                head = lc.LayerHead(epochs=1, seed=0, device=gpu, progress=False).fit(cache)
                epochs[name].append(head.history_.epochs[0].seconds)
                task_metrics = next(iter(head.validation_metrics_.values()))  # task -> {metric: value}
                scores[name] = float(task_metrics.get("accuracy", next(iter(task_metrics.values()))))
    for name in epochs:
        results["checks"][f"{name}_head_epoch_s"] = statistics.median(epochs[name])
        results["checks"][f"{name}_validation_score"] = scores[name]


if __name__ == "__main__":
    raise SystemExit(main())
