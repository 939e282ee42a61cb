"""The plan of the README's own example at its real size: a RoBERTa-large-shaped model over IMDB-shaped data.

A RoBERTa-large-shaped model (24 layers, 1024 wide, random weights: sizes and speed do not depend on them) and
25,000 + 25,000 texts whose token counts follow IMDB's review lengths: log-normal, with IMDB's median/mean of
174/231 words, scaled to a mean of ``--mean-tokens`` (default 290) tokens before truncation. Long reviews are what
truncation at 512 cuts, so the token count, and with it every size, depends on that tail: texts of evenly spread
lengths (the README's H100 table) hold 14.5M tokens where IMDB-shaped ones hold 12.7M.

Then ``layercache plan`` prices every storage choice for them (``--out`` is where the cache would go: its free
space decides "fits"). Prints the plan and writes its JSON (default ``benchmarks/results/plan_imdb.json``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, REPO, work_folder  # noqa: E402

IMDB_MEDIAN_WORDS, IMDB_MEAN_WORDS = 174, 231
"""IMDB's review lengths in words (the shape of the distribution; the scale is ``--mean-tokens``)."""


def make_model(folder: Path, max_length: int = 512) -> Path:
    """A RoBERTa-large-shaped model with random weights and a word-piece tokenizer of the built-in vocabulary."""
    import torch
    import transformers

    sys.path.insert(0, str(REPO / "tests"))
    from tiny_models import make_tokenizer

    tok = make_tokenizer(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_max_length"] = max_length
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    cfg = transformers.RobertaConfig(vocab_size=len(tok), hidden_size=1024, num_hidden_layers=24,
                                     num_attention_heads=16, intermediate_size=4096,
                                     max_position_embeddings=max_length + 2, pad_token_id=tok.pad_token_id,
                                     bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    torch.manual_seed(0)
    transformers.RobertaModel(cfg).save_pretrained(folder)
    return folder


def write_texts(path: Path, n: int, mean_tokens: float, seed: int) -> dict:
    """``n`` labelled texts of IMDB-shaped token counts (one token per word of the built-in vocabulary)."""
    import numpy as np
    import transformers

    from layercache.sources.builtin import builtin_vocabulary

    tok = transformers.AutoTokenizer.from_pretrained(path.parent / "model")
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
    p.add_argument("--per-split", type=int, default=25_000)
    p.add_argument("--device", default="auto")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--json", type=Path, default=HERE / "results" / "plan_imdb.json")
    p.add_argument("plan_options", nargs="*", help="more `layercache plan` options, after --")
    args = p.parse_args(argv)
    with work_folder(args.workdir, "plan-imdb-") as work:
        model = work / "model"
        if not (model / "config.json").exists():
            make_model(model)
        data = {split: write_texts(work / f"imdb_{split}.jsonl", args.per_split, args.mean_tokens, seed)
                for seed, split in enumerate(("train", "test"))}
        for split, d in data.items():
            print(f"{split}: {d['texts']:,} texts, {d['tokens']:,} tokens, {d['share_over_512']:.1%} over 512 "
                  f"({d['tokens_within_512']:,} within 512)", flush=True)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        out = args.out if args.out is not None else work / "planned"
        cmd = [sys.executable, "-m", "layercache.cli", "plan", str(model), "--device", args.device,
               "--split", f"train={work / 'imdb_train.jsonl'}", "--split", f"test={work / 'imdb_test.jsonl'}",
               "--out", str(out), "--json", str(args.json), *args.plan_options]
        code = subprocess.run(cmd).returncode
    if code == 0:
        plan = json.loads(args.json.read_text())
        args.json.write_text(json.dumps({"data": data, "plan": plan}, indent=1))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
