"""The plan of the README's own example at its real size: a RoBERTa-large-shaped model over IMDB-shaped data.

A RoBERTa-large-shaped model (24 layers, 1024 wide, random weights: sizes and speed do not depend on them) and
25,000 + 25,000 texts whose token counts follow IMDB's review lengths: log-normal, with IMDB's median/mean of
174/231 words, scaled to a mean of ``--mean-tokens`` (default 290) tokens before truncation. Long reviews are what
truncation at 512 cuts, so the token count, and with it every size, depends on that tail: texts of evenly spread
lengths (the README's H100 table) hold 14.5M tokens where IMDB-shaped ones hold 12.7M.

Then ``layercache plan`` (the command, ``python -m layercache plan``) prices every storage choice for them (``--out``
is where the cache would go: its free space decides "fits"). Prints the plan and writes its JSON with the data's
token counts (default ``benchmarks/results/plan_imdb.json``).

``--quick`` (seconds): a tiny model of the same kind (2 layers, 64 wide, the same 512-token limit), 200 + 200
texts, the plan without its quality check (``--quality-sample 0``), and float16 and int8 caches of the same texts
really extracted, to check what does not depend on timing: the plan counts the texts and tokens written (within
512), its tokens float16 row takes at least the raw states' bytes (tokens x states x width x 2) and at most 25 %
more, int8 and int4 about 1/2 and 1/4 of float16 (their scales and the float16 pooled vectors add to that), each
projection and the pooled cache less than full width, "fits" never said of more than the space, and the priced
float16 and int8 bytes within 3 % (or 64 KiB) of what ``layercache.extract`` writes (``benchmarks/extract.py``'s
check of ``estimate_bytes``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as extraction_bench  # noqa: E402
from _common import HERE, REPO, machine_meta, print_table, quiet_transformers, work_folder, write_results  # noqa: E402

IMDB_MEDIAN_WORDS, IMDB_MEAN_WORDS = 174, 231
"""IMDB's review lengths in words (the shape of the distribution; the scale is ``--mean-tokens``)."""


SIZES = {"full": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                  "intermediate_size": 4096},
         "quick": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}}
"""The model's shape: RoBERTa-large's, or a tiny one of the same kind for --quick."""
QUICK_PER_SPLIT = 200
BYTES = {"tokens int8": (0.5, 0.6), "tokens int4": (0.25, 0.4)}
"""--quick: each full-width choice's bytes over tokens float16's (the states' share, plus scales and pooled float16)."""
RAW_MARGIN = 1.25


def make_model(folder: Path, max_length: int = 512, size: str = "full") -> Path:
    """A RoBERTa-large-shaped model (``size="quick"``: a tiny one) with random weights and a word-piece tokenizer of
    the built-in vocabulary."""
    import torch
    import transformers

    sys.path.insert(0, str(REPO / "tests"))
    from tiny_models import make_tokenizer

    tok = make_tokenizer(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_max_length"] = max_length
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    cfg = transformers.RobertaConfig(vocab_size=len(tok), **SIZES[size],
                                     max_position_embeddings=max_length + 2, pad_token_id=tok.pad_token_id,
                                     bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    torch.manual_seed(0)
    transformers.RobertaModel(cfg).save_pretrained(folder)
    return folder


def write_texts(path: Path, n: int, mean_tokens: float, seed: int, model: Path | None = None) -> dict:
    """``n`` labelled texts of IMDB-shaped token counts (one token per word of the built-in vocabulary)."""
    import numpy as np
    import transformers

    from layercache.sources import builtin_vocabulary

    tok = transformers.AutoTokenizer.from_pretrained(model or path.parent / "model")
    words = [w for w in builtin_vocabulary() if len(tok(w, add_special_tokens=False)["input_ids"]) == 1]
    rng = np.random.default_rng(seed)
    sigma = float(np.sqrt(2 * np.log(IMDB_MEAN_WORDS / IMDB_MEDIAN_WORDS)))  # log-normal: mean/median = e^(s^2/2)
    median = mean_tokens / np.exp(sigma ** 2 / 2)
    tokens = np.maximum(5, np.round(rng.lognormal(np.log(median), sigma, n))).astype(int)  # with [CLS] [SEP]
    with open(path, "w", encoding="utf-8") as f:
        for i, count in enumerate(tokens):
            f.write(json.dumps({"text": " ".join(rng.choice(words, size=count - 2)), "label": i % 2}) + "\n")
    return {"texts": n, "tokens": int(tokens.sum()), "tokens_within_512": int(np.minimum(tokens, 512).sum()),
            "share_over_512": float((tokens > 512).mean())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="where the cache would go (its free space decides 'fits')")
    p.add_argument("--mean-tokens", type=float, default=290.0)
    p.add_argument("--per-split", type=int, default=None, help=f"texts per split (default 25000; --quick "
                                                               f"{QUICK_PER_SPLIT})")
    p.add_argument("--device", default="auto")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=HERE / "results" / "plan_imdb.json")
    p.add_argument("--quick", action="store_true", help="a tiny model and 200 + 200 texts, with checks: seconds")
    p.add_argument("plan_options", nargs="*", help="more `layercache plan` options, after --")
    args = p.parse_args(argv)
    args.per_split = args.per_split or (QUICK_PER_SPLIT if args.quick else 25_000)
    plan_options = list(args.plan_options) or (["--quality-sample", "0"] if args.quick else [])
    started = time.perf_counter()
    quiet_transformers()
    with work_folder(args.workdir, "plan-imdb-") as work:
        model = work / ("model-quick" if args.quick else "model")
        if not (model / "config.json").exists():
            make_model(model, size="quick" if args.quick else "full")
        data = {split: write_texts(work / f"imdb_{split}.jsonl", args.per_split, args.mean_tokens, seed, model)
                for seed, split in enumerate(("train", "test"))}
        for split, d in data.items():
            print(f"{split}: {d['texts']:,} texts, {d['tokens']:,} tokens, {d['share_over_512']:.1%} over 512 "
                  f"({d['tokens_within_512']:,} within 512)", flush=True)
        out = args.out if args.out is not None else work / "planned"
        plan_json = work / "plan.json"
        files = {split: str(work / f"imdb_{split}.jsonl") for split in data}
        cmd = [sys.executable, "-m", "layercache", "plan", str(model), "--device", args.device,
               *(arg for split, path in files.items() for arg in ("--split", f"{split}={path}")),
               "--out", str(out), "--json", str(plan_json), *plan_options]
        t = time.perf_counter()
        code = subprocess.run(cmd).returncode
        plan_s = time.perf_counter() - t
        if code != 0:
            return code
        plan = json.loads(plan_json.read_text())
        extracted = extract_priced(model, files, work, args.device) if args.quick else {}
    results = {"meta": {**machine_meta(args.quick, "roberta-large-shaped" if not args.quick else "tiny roberta",
                                       args.device),
                        "model_size": SIZES["quick" if args.quick else "full"], "per_split": args.per_split,
                        "mean_tokens": args.mean_tokens, "plan_options": plan_options, "plan_s": plan_s,
                        "total_s": time.perf_counter() - started},
               "data": data, "plan": plan, "extracted": extracted}
    results["checks"] = checks(results) if args.quick else {}
    results["figures"] = figures(results)
    results["figure_directions"] = {"tokens": "either"}  # for compare.py: the data's size, not a cost
    if results["checks"]:
        print_table("Checks (independent of timing)", ["check", "holds"], list(map(list, results["checks"].items())))
    write_results(results, args.json)
    failed = [k for k, ok in results["checks"].items() if not ok]
    assert not failed, f"plan_imdb checks failed: {failed}"
    return 0


def extract_priced(model: Path, files: dict[str, str], work: Path, device: str) -> dict[str, dict]:
    """The float16 and int8 token caches of the texts, really extracted: choice -> ``extract.cache_size``."""
    import layercache

    sizes = {}
    for dtype in ("float16", "int8"):
        out = work / f"extracted-{dtype}"
        layercache.extract(str(model), None, out, split_files=files, storage_dtype=dtype, device=device,
                           progress=False, quality_examples=0, overwrite=True)
        sizes[f"tokens {dtype}"] = extraction_bench.cache_size(out)
    return sizes


def figures(results: dict) -> dict[str, float]:
    """The headline figures, flat, for ``benchmarks/compare.py``: the plan's wall time, the data's tokens, and each
    choice's priced bytes (and over float16's) and extraction time."""
    plan = results["plan"]
    rows = {row["name"]: row for row in plan["choices"]}
    f16 = rows.get("tokens float16", {}).get("bytes")
    out: dict[str, float] = {"total_s": results["meta"]["total_s"], "plan_s": results["meta"]["plan_s"],
                             "tokens": sum(s["tokens"] for s in plan["splits"].values())}
    for name, row in rows.items():
        key = name.replace(" + ", "_").replace(" ", "_")
        if row.get("bytes"):
            out[f"{key}_bytes"] = row["bytes"]
            if f16 and name != "tokens float16":
                out[f"{key}_to_float16_ratio"] = row["bytes"] / f16
        if isinstance(row.get("extraction_seconds"), (int, float)):
            out[f"{key}_extraction_s"] = row["extraction_seconds"]
    return out


def tables(results: dict) -> dict[str, str]:
    """Markdown of a run for ``render.py``: ``sizes``, each storage choice's size and whether it fits the folder
    (``no cache`` left out; the plan's recommendation in bold)."""
    plan = results["plan"]
    free = plan["free_bytes"] / 2**30
    rows = [f"| choice | size | fits {free:.1f} GiB free |", "|---|---|---|"]
    for choice in plan["choices"]:
        if choice["store"] == "none":
            continue
        size = f"{choice['bytes'] / 2**30:.1f} GiB"
        if choice["fits"]:
            fits = "yes" + (" (recommended)" if choice["name"] == plan["recommended"] else "")
        elif choice["bytes"] <= plan["free_bytes"]:
            fits = "no: within the free space, not within the margin `extract` keeps"
        else:
            fits = "no"
        if choice["name"] == plan["recommended"]:
            size = f"**{size}**"
        rows.append(f"| {choice['name']} | {size} | {fits} |")
    tokens = results.get("figures", {}).get("tokens")
    return {"sizes": "\n".join(rows) + "\n" + (f"\n{tokens:,} tokens after truncation at 512.\n" if tokens else "")}


def checks(results: dict) -> dict[str, bool]:
    """What --quick asserts: the plan's counts and priced sizes against the data and against real caches."""
    plan, data, meta = results["plan"], results["data"], results["meta"]
    rows = {row["name"]: row for row in plan["choices"]}
    f16 = rows["tokens float16"]["bytes"]
    states = meta["model_size"]["num_hidden_layers"] + 1
    tokens = sum(d["tokens_within_512"] for d in data.values())
    raw = tokens * states * meta["model_size"]["hidden_size"] * 2
    found = {
        "the plan counts every text": all(plan["splits"][s]["examples"] == d["texts"] for s, d in data.items()),
        "the plan counts every token within 512": all(plan["splits"][s]["tokens"] == d["tokens_within_512"]
                                                      for s, d in data.items()),
        f"tokens float16 takes the raw states' bytes to {RAW_MARGIN}x": raw <= f16 <= RAW_MARGIN * raw,
        "fits only within the space": all(not row["fits"] or row["bytes"] <= plan["space_bytes"]
                                          for row in rows.values() if row.get("bytes")),
    }
    for name, (low, high) in BYTES.items():
        found[f"{name} takes {low}-{high}x of float16"] = low <= rows[name]["bytes"] / f16 <= high
    for name, row in rows.items():
        full, _, projected = name.partition(" + ")
        if projected and full in rows:
            found[f"{name} less than {full}"] = row["bytes"] < rows[full]["bytes"]
    if "pooled float16" in rows:
        found["pooled float16 less than tokens float16"] = rows["pooled float16"]["bytes"] < f16
    for name, size in results["extracted"].items():
        priced = dict(size, estimate_bytes=rows[name]["bytes"])  # the plan's price in place of the estimate
        found[f"{name}: priced within 3 % (or 64 KiB) of the cache extract() writes"] = \
            extraction_bench.estimate_ok(priced)
    return found


if __name__ == "__main__":
    raise SystemExit(main())
