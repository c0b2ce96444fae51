#!/usr/bin/env python3
"""Converts an mtpspec checkpoint directory (config.json + safetensors) to GGUF with a llama.cpp source
tree the user provides, for the side-by-side speed comparison (scripts/compare_llama_cpp.sh).

    python scripts/llama_cpp_convert.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf --outtype q8_0 \
        --tokenizer models/glm-tiny-mtp/tokenizer.json

llama.cpp's own converter (convert_hf_to_gguf.py) does all of the work except one step: random checkpoints
carry no tokenizer, and its GLM vocabulary step asks transformers for GLM's special tokens. This wrapper
replaces only that step. It writes the byte-level BPE vocabulary of the given tokenizer.json, padded with
unused entries to the config's vocab_size. Speed does not depend on the vocabulary. FP8 weights are
dequantised by the converter (it reads quantization_config) and requantised to --outtype.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("llama_cpp", type=Path, help="llama.cpp source tree (holds convert_hf_to_gguf.py)")
    parser.add_argument("model", type=Path, help="checkpoint directory (glm_moe_dsa or glm4_moe_lite)")
    parser.add_argument("out", type=Path, help="GGUF file to write")
    parser.add_argument("--outtype", default="bf16", choices=["f32", "bf16", "q8_0"])
    parser.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json whose BPE vocabulary to write")
    args = parser.parse_args()

    root = args.llama_cpp.resolve()
    if not (root / "convert_hf_to_gguf.py").is_file():
        print(f"llama_cpp_convert: {root} holds no convert_hf_to_gguf.py", file=sys.stderr)
        return 2
    config = json.loads((args.model / "config.json").read_text())
    if config.get("model_type") not in ("glm_moe_dsa", "glm4_moe_lite"):
        print(f"llama_cpp_convert: {args.model}/config.json: model_type {config.get('model_type')!r}; "
              "only glm_moe_dsa and glm4_moe_lite are wired here", file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    sys.path.insert(1, str(root / "gguf-py"))
    import gguf  # noqa: E402  (from the llama.cpp tree)
    import convert_hf_to_gguf  # noqa: E402
    from conversion import glm  # noqa: E402

    tokenizer = json.loads(args.tokenizer.read_text())

    def set_vocab(self) -> None:
        vocab_size = self.hparams["vocab_size"]
        tokens = [f"[PAD{i}]" for i in range(vocab_size)]  # [vocab_size]
        types = [gguf.TokenType.UNUSED] * vocab_size  # [vocab_size]
        for text, token_id in tokenizer["model"]["vocab"].items():
            if token_id < vocab_size:
                tokens[token_id], types[token_id] = text, gguf.TokenType.NORMAL
        eos = None
        for added in tokenizer.get("added_tokens", []):
            if added["id"] < vocab_size:
                tokens[added["id"]], types[added["id"]] = added["content"], gguf.TokenType.CONTROL
                if added["content"] == "<|endoftext|>":
                    eos = added["id"]
        merges = [" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"].get("merges", [])]
        writer = self.gguf_writer
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        if eos is not None:
            writer.add_eos_token_id(eos)
            writer.add_bos_token_id(eos)

    glm.GlmMoeDsaModel.set_vocab = set_vocab
    glm.Glm4MoeLiteModel.set_vocab = set_vocab
    sys.argv = ["convert_hf_to_gguf.py", str(args.model), "--outfile", str(args.out), "--outtype", args.outtype]
    convert_hf_to_gguf.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
