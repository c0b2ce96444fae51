"""One carried adaptive-k controller over 24 held-out prompts of the trained model: per request, the
k decisions, the probes, whether the drafter deferred the prompt (Stats.prompts_deferred), and the
controller's expected tokens/s for k = 0, 1, 2.

Usage (with the bindings installed, e.g. by scripts/test_python.sh, and build/heldout made):
  build/pyenv/bin/python bench/report/carried_deferral.py [--model models/glm-tiny-mtp] [--tokens build/heldout/prose.npy]
"""

from __future__ import annotations

import argparse

import numpy as np

import mtpspec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/glm-tiny-mtp")
    parser.add_argument("--tokens", default="build/heldout/prose.npy")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--k-max", type=int, default=5)
    args = parser.parse_args()
    model = mtpspec.Model.load(args.model)
    ids = np.load(args.tokens)
    rng = np.random.default_rng(7)
    controller = mtpspec.AdaptiveController(k_max=args.k_max)
    deferred = 0
    for request in range(args.requests):
        start = int(rng.integers(0, len(ids) - args.context - args.new_tokens))
        prompt = [int(x) for x in ids[start:start + args.context]]
        out = model.generate(prompt, args.new_tokens, k=args.k_max, adaptive_k=True, adaptive_controller=controller,
                             stop_at_eos=False, temperature=0.0)
        s = out.stats
        deferred += s.prompts_deferred
        rates = " ".join(f"{controller.expected_tokens_per_second(k):.0f}" for k in range(3))
        print(f"request {request}: k used {s.k_decisions.tolist()}, probes {s.probe_decisions.tolist()}, "
              f"prompt deferred {s.prompts_deferred}, expected tok/s k=0,1,2 {rates}")
    print(f"prompts deferred: {deferred} of {args.requests}")


if __name__ == "__main__":
    main()
