"""Chat-template goldens: what transformers' own apply_chat_template renders for the GLM-style and
DeepSeek-style templates beside this file, over several message shapes (a system turn, several turns,
an earlier turn's reasoning, thinking on and off, a tool message). tests/python/test_chat.py holds
mtpspec's renderer (python/mtpspec/_chat.py) to them.

  python research/chat/make_chat_goldens.py   # -> tests/python/data/chat_goldens.json

Needs transformers (and tokenizers); the templates are this project's own, written in the releases'
formats.
"""

from __future__ import annotations

import json
from pathlib import Path

import transformers
from transformers import PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

CASES = [
    {"messages": [{"role": "user", "content": "Hello"}], "kwargs": {}},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
     "kwargs": {}},
    {"messages": [{"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "<think>easy</think>\n4"},
                  {"role": "user", "content": "and 3+3?"}], "kwargs": {}},
    {"messages": [{"role": "user", "content": "Think first."}], "kwargs": {"enable_thinking": False}},
    {"messages": [{"role": "user", "content": "Think first."}], "kwargs": {"thinking": True}},
    {"messages": [{"role": "user", "content": "Weather?"}, {"role": "tool", "content": {"temp": "21 °C"}}],
     "kwargs": {}},
    {"messages": [{"role": "user", "content": "No prompt."}], "kwargs": {}, "add_generation_prompt": False},
]


def main() -> None:
    out = {"transformers": transformers.__version__, "templates": {}}
    for name in ("glm_style", "deepseek_style"):
        source = (HERE / f"{name}.jinja").read_text()
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(ROOT / "models" / "glm-tiny-mtp" / "tokenizer.json"),
                                            bos_token="<｜begin▁of▁sentence｜>")
        tokenizer.chat_template = source
        cases = []
        for case in CASES:
            if name == "deepseek_style" and any(m["role"] == "tool" for m in case["messages"]):
                continue  # the DeepSeek-style template refuses tool turns (raise_exception): tested apart
            add = case.get("add_generation_prompt", True)
            text = tokenizer.apply_chat_template(case["messages"], tokenize=False, add_generation_prompt=add,
                                                 **case["kwargs"])
            cases.append({**case, "add_generation_prompt": add, "expected": text})
        out["templates"][name] = {"file": f"research/chat/{name}.jinja", "bos_token": tokenizer.bos_token,
                                  "cases": cases}
    path = ROOT / "tests" / "python" / "data" / "chat_goldens.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
