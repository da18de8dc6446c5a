"""Cost of one criteria-confusion aspect call in the paper's setting (Hu et al. 2024, App. C.2) on the
embedded judge (SmolLM2-135M, llama.cpp on CPU). Prints ``NAME value`` lines.

The call: the first SummEval item of the seeded selection, its original reference, one aspect with its
"detailed" description, the analyse-then-rate prompt of dhp.judging.aspects, ``n`` replies at temperature
1.0 in ONE request (dhp.judging.aspects defaults: n = 10, max_tokens = 256). Nothing is cached: the cache
is a fresh temporary file, and the model is loaded before the clock starts.

    seconds                 wall time of the call (all n replies)
    prompt_tokens           tokens of the prompt (chat template included)
    completion_tokens       tokens generated over all replies
    tokens_per_second       completion_tokens / seconds
    replies                 n
    replies_with_rating     replies whose rating parses after the analysis (dhp.judging.parsing.parse_rating)
    load_average_1min       the machine's load when the call ended (the CPU is shared: read timings with it)

Usage: python benchmarks/confusion_aspect_call.py [--n-samples 10] [--max-tokens 256] [--aspect fluency]
[--data-dir DIR]. About 1-2 minutes on 2 free cores with the defaults.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from dhp.backends import get_backend
from dhp.datasets import criteria_hu2024 as crit
from dhp.datasets import load_dataset
from dhp.judging import aspects
from dhp.perturb import perturb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-samples", type=int, default=aspects.N_SAMPLES)
    ap.add_argument("--max-tokens", type=int, default=aspects.MAX_TOKENS)
    ap.add_argument("--aspect", default="fluency")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()

    items = load_dataset("summeval", n_items=1, seed=0, data_dir=args.data_dir)
    variants = perturb(items, seed=0, perturber="rule", perturbations=["negation"])
    prompts = aspects.aspect_prompts(variants[variants["perturbation"] == "original"], items,
                                     crit.load_criteria(data_dir=args.data_dir), aspects=[args.aspect])
    backend = get_backend("embedded")
    backend.count_tokens("load the model before the clock starts")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        scores, stats = aspects.score_aspects(prompts, backend, n_samples=args.n_samples, max_tokens=args.max_tokens,
                                               cache=Path(tmp) / "cache.sqlite")
        seconds = time.perf_counter() - start
    print(f"seconds {seconds:.1f}")
    print(f"prompt_tokens {stats['prompt_tokens_submitted']}")
    print(f"completion_tokens {stats['completion_tokens']}")
    print(f"tokens_per_second {stats['completion_tokens'] / seconds:.1f}")
    print(f"replies {args.n_samples}")
    print(f"replies_with_rating {int(scores['n_valid'].iloc[0])}")
    print(f"load_average_1min {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
