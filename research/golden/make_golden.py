#!/usr/bin/env python3
"""Independent oracle: golden fixtures for mtpspec, produced with Hugging Face `transformers`.

What it does
------------
Builds tiny random models of the `glm_moe_dsa` / `deepseek_v32` (DSA indexer) and `glm4_moe_lite` /
`deepseek_v3` (no indexer) types, writes each one as an HF-layout checkpoint (checkpoint tensor names,
per-expert MoE tensors, plus an MTP layer at index `num_hidden_layers`), reloads the checkpoint with
`from_pretrained` and records what transformers computes (prefill, cached decode, indexer top-k where
there is an indexer, MTP reference logits) into
`tests/golden/<name>/`:

    config.json           HF config, as `save_pretrained` writes it
    model.safetensors     checkpoint (fp32 for glm_a / dsv32_b, bf16 for glm_a_bf16)
    fixture.safetensors   reference tensors (see research/golden/README.md for the full list)
    golden.json           versions, seeds, the asserted indexer RoPE style, self-check numbers

Configs: `glm_a` (glm_moe_dsa, fp32, IndexShare full/shared layers), `dsv32_b` (deepseek_v32, fp32,
YaRN, grouped routing, MTP layer with embed/head copies), `glm_a_bf16` (the glm_a weights rounded
to bf16; logits from fp32 compute on the upcast weights and from bf16 compute), `glm47_c` (glm4_moe_lite,
GLM-4.7-Flash layout, MTP layer with its own embed/head copies that differ from the trunk's) and `dsv3_d`
(deepseek_v3, YaRN, grouped routing, MTP copies equal to the trunk's; also records transformers' own
generate(use_mtp=True) drafts).

How to run (from the repository root; CPU only, ~30 s on 2 cores, ~4 MB of output):

    python3 research/golden/make_golden.py                 # writes tests/golden/{glm_a,dsv32_b,glm_a_bf16,glm47_c,dsv3_d}
    python3 research/golden/make_golden.py --out /tmp/g    # somewhere else
    python3 research/golden/make_golden.py --only glm_a    # one config; repeatable. `--only glm_a_bf16` rebuilds
                                                        # glm_a's weights in a scratch directory (same seeds)
                                                        # and leaves tests/golden/glm_a untouched

The output is byte-identical from run to run. Exit status 1 (with the reasons on stderr) if any
self-check misses its tolerance; an AssertionError if the indexer RoPE probe or the load-back fails.

Requirements: transformers >= 5.23 (the conventions note in README.md was read from 5.23.0; the
script refuses older versions and warns on newer ones), torch, safetensors, numpy.
Everything is fp32 eager attention on CPU with fixed seeds, so reruns reproduce the files.

Besides recording HF's numbers the script checks them (and fails loudly if a check fails):
  * the indexer RoPE style each installed model class really uses (GLM must be interleaved,
    DeepSeek-V3.2 half-split), probed by running the indexer module on crafted inputs; for the types
    without an indexer, that the main MLA follows `rope_interleave`;
  * checkpoint round trip (per-expert names load back into HF with no missing keys);
  * prefill == two-chunk prefill through the HF cache; cached decode == longer prefill;
  * a from-scratch float64 re-implementation of docs/models.md (MLA, indexer, IndexShare, MoE
    router, YaRN, MTP) reproduces HF's logits and top-k sets;
  * MTP batched prefill == token-by-token MTP calls;
  * deepseek_v3: transformers' generate(use_mtp=True) drafts == the MTP layer assembled here.
"""

from __future__ import annotations

# This file is the entry point only; the work lives in sibling modules (imported as top-level
# modules, since Python puts this folder on sys.path when it runs the script):
#   configs.py         glm_a / dsv32_b / glm47_c / dsv3_d configs, seeds, sizes, Family, the MTP layer's 1-layer config
#   versions.py        the transformers version gate and the versions recorded in golden.json
#   checkpoint.py      random weights, per-expert checkpoint names, building and casting checkpoints
#   rope_probe.py      the indexer RoPE style probe and the legacy YaRN spelling check
#   hf_runs.py         load-back, prefill / decode through HF's cache, the cache self-checks
#   mtp_head.py        the MTP layer assembled from HF's decoder layer, and the MTP reference logits
#   hf_mtp.py          transformers' own generate(use_mtp=True) drafting (deepseek_v3), recorded and cross-checked
#   spec_reference.py  the float64 re-implementation of docs/models.md and the cross-check against HF
#   checks.py          error measures, robustness margins, tolerances
#   write_fixtures.py  one config end to end: checkpoint, config.json, fixture.safetensors, summary

import argparse
import json
import os
import sys
import tempfile

import torch

from checks import enforce
from configs import Family, dsv3_d_config, dsv32_b_config, glm47_c_config, glm_a_config
from rope_probe import assert_indexer_rope_styles
from versions import check_versions, environment_record
from write_fixtures import generate_bf16, generate_fp32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    repo_root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--out", default=os.path.join(repo_root, "tests", "golden"))
    parser.add_argument("--only", choices=["glm_a", "dsv32_b", "glm_a_bf16", "glm47_c", "dsv3_d"], action="append")
    args = parser.parse_args()
    check_versions()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    wanted = args.only or ["glm_a", "dsv32_b", "glm_a_bf16", "glm47_c", "dsv3_d"]

    probes = assert_indexer_rope_styles()
    env = environment_record(probes)
    summaries = []
    glm_source = None
    if "glm_a" in wanted:
        summary, glm_source = generate_fp32("glm_a", glm_a_config(), args.out, probes)
        summaries.append(summary)
    elif "glm_a_bf16" in wanted:  # rebuild glm_a's weights in a scratch directory, leave tests/golden/glm_a alone
        with tempfile.TemporaryDirectory() as scratch:
            glm_source = generate_fp32("glm_a", glm_a_config(), scratch, probes)[1]
    if "dsv32_b" in wanted:
        summaries.append(generate_fp32("dsv32_b", dsv32_b_config(), args.out, probes)[0])
    if "glm_a_bf16" in wanted:
        summaries.append(generate_bf16("glm_a_bf16", "glm_a", glm_source, glm_a_config(), args.out, probes))
    if "glm47_c" in wanted:
        summaries.append(generate_fp32("glm47_c", glm47_c_config(), args.out, probes)[0])
    if "dsv3_d" in wanted:
        summaries.append(generate_fp32("dsv3_d", dsv3_d_config(), args.out, probes)[0])

    failures = []
    for summary in summaries:
        summary.update(env)
        if not Family(summary["model_type"]).has_indexer:
            summary["indexer_rope_probe"] = f"not applicable: {summary['model_type']} has no indexer"
        with open(os.path.join(args.out, summary["name"], "golden.json"), "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        print(f"\n== {summary['name']} ({summary['model_type']}) -> {os.path.join(args.out, summary['name'])}")
        print(f"   logits: {summary['logits']}")
        for key, value in summary["self_checks"].items():
            print(f"   {key}: {value}")
        failures += enforce(summary)
    if failures:
        print("\nSELF-CHECK FAILURES:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("\nall self-checks passed")


if __name__ == "__main__":
    main()
