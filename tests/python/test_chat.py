"""Chat templates render as transformers' apply_chat_template renders them (goldens made by
research/chat/make_chat_goldens.py with transformers itself), and every front end renders through
the same code: Model.apply_chat_template, Model.generate(messages=...) and the server's chat
endpoint (tests/python/test_server.py)."""

from __future__ import annotations

import json

import pytest

import mtpspec
from mtpspec._chat import ChatTemplate, ChatTemplateError
from conftest import ROOT, THREADS

GOLDENS = json.loads((ROOT / "tests" / "python" / "data" / "chat_goldens.json").read_text())
TRAINED = ROOT / "models" / "glm-tiny-mtp"
TEMPLATE = ROOT / "research" / "chat" / "glm_style.jinja"


@pytest.mark.parametrize("name", sorted(GOLDENS["templates"]))
def test_templates_render_as_transformers_does(name: str) -> None:
    golden = GOLDENS["templates"][name]
    template = ChatTemplate((ROOT / golden["file"]).read_text(), {"bos_token": golden["bos_token"]}, golden["file"])
    assert golden["cases"], name
    for case in golden["cases"]:
        rendered = template.render(case["messages"], add_generation_prompt=case["add_generation_prompt"],
                                   **case["kwargs"])
        assert rendered == case["expected"], (name, case["messages"], case["kwargs"])


def test_raise_exception_and_bad_messages_are_errors() -> None:
    template = ChatTemplate((ROOT / "research" / "chat" / "deepseek_style.jinja").read_text(), {"bos_token": "<s>"},
                            "deepseek_style.jinja")
    with pytest.raises(ChatTemplateError, match="the role tool is not supported"):
        template.render([{"role": "tool", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="messages must be a list"):
        template.render("hello")  # type: ignore[arg-type]


def test_the_model_renders_and_generates_from_messages() -> None:
    model = mtpspec.Model.load(TRAINED, threads=THREADS)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"}]
    with pytest.raises(ValueError, match=r"no chat template \(chat_template.jinja.*chat_template=FILE"):
        model.apply_chat_template(messages)
    text = model.apply_chat_template(messages, chat_template=TEMPLATE, enable_thinking=False)
    assert text == "[gMASK]<sop><|system|>\nBe brief.<|user|>\nOnce upon a time<|assistant|></think>"
    # generate(messages=...) is generate(rendered text); the model's own template or none: the override
    # reaches generate through a checkpoint folder that has the template.
    with pytest.raises(ValueError, match="no chat template"):
        model.generate(messages=messages, max_new_tokens=4)
    with pytest.raises(ValueError, match="give a prompt or messages, not both"):
        model.generate("x", 4, messages=messages)


def test_generate_from_messages_equals_the_rendered_prompt(tmp_path) -> None:
    folder = tmp_path / "with_template"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(TRAINED / name)
    (folder / "chat_template.jinja").write_text(TEMPLATE.read_text())
    model = mtpspec.Model.load(folder, threads=THREADS)
    messages = [{"role": "user", "content": "It is a truth universally acknowledged"}]
    chat = model.generate(messages=messages, max_new_tokens=16, chat_template_kwargs={"enable_thinking": False},
                          temperature=0.7, seed=3)
    plain = model.generate(model.apply_chat_template(messages, enable_thinking=False), 16, temperature=0.7, seed=3)
    assert chat.tokens == plain.tokens


def test_deepseek_v32_encoder_writes_the_published_format() -> None:
    from mtpspec._chat import DeepSeekV32Encoder

    bos, eos = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    encoder = DeepSeekV32Encoder("test")
    history = [{"role": "user", "content": "hello"},
               {"role": "assistant", "content": "Hello! I am DeepSeek.", "reasoning_content": "thinking..."},
               {"role": "user", "content": "1+1=?"}]
    # The published example (thinking mode): the earlier turn's reasoning is dropped.
    assert encoder.render(history, thinking=True) == (
        f"{bos}<｜User｜>hello<｜Assistant｜></think>Hello! I am DeepSeek.{eos}<｜User｜>1+1=?<｜Assistant｜><think>")
    # Chat mode closes the thinking at once; a system turn follows the BOS as it is; the BOS is optional.
    system = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "hi"}]
    assert encoder.render(system) == f"{bos}You are a helpful assistant.<｜User｜>hi<｜Assistant｜></think>"
    assert encoder.render(system, add_bos=False).startswith("You are a helpful assistant.")
    assert encoder.render(system, add_generation_prompt=False) == f"{bos}You are a helpful assistant.<｜User｜>hi"
    for bad, message in (([{"role": "tool", "content": "x"}], "not supported"),
                         ([{"role": "assistant", "content": "x"}], "must follow a user turn"),
                         (history[:2], "must end with a user turn")):
        with pytest.raises(ChatTemplateError, match=message):
            encoder.render(bad)
    with pytest.raises(ChatTemplateError, match="takes thinking and add_bos"):
        encoder.render(history, enable_thinking=True)


def test_a_deepseek_v32_checkpoint_without_a_template_uses_the_encoder() -> None:
    model = mtpspec.Model.load(ROOT / "tests" / "golden" / "dsv32_b", threads=THREADS)
    text = model.apply_chat_template([{"role": "user", "content": "hi"}], thinking=True)
    assert text == "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>"
