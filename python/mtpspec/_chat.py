"""Chat prompts: the checkpoint's chat template (chat_template.jinja, or chat_template in
tokenizer_config.json) or a file given in its place, rendered as transformers renders templates:
jinja2 in a sandbox with trim_blocks and lstrip_blocks, the loopcontrols extension, the tojson
filter, raise_exception and strftime_now, and the tokenizer's special tokens as variables.
Model.apply_chat_template, Model.generate(messages=...) and the server's chat endpoint all render
through ChatTemplate."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional


class ChatTemplateError(ValueError):
    """The template refused the messages (raise_exception, or input it cannot render)."""


class ChatTemplate:
    def __init__(self, source: str, variables: Dict[str, Any], origin: str) -> None:
        try:
            from jinja2.exceptions import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as e:
            raise ImportError("chat templates need jinja2: pip install jinja2 (or mtpspec[serve])") from e

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        def tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
                   separators: Any = None, sort_keys: bool = False) -> str:
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                              sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._template = env.from_string(source)
        self._variables = variables
        self.origin = origin

    def render(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The prompt text of `messages`; `kwargs` are template variables (chat_template_kwargs, such as
        enable_thinking). Raises ChatTemplateError naming the template when it refuses them."""
        from jinja2.exceptions import TemplateError

        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} objects")
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         **{**self._variables, **kwargs})
        except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as e:
            raise ChatTemplateError(f"the chat template ({self.origin}) refused the messages: {e}") from e


class DeepSeekV32Encoder:
    """DeepSeek-V3.2's chat format, which its release ships as a Python encoder rather than a Jinja
    template (encoding/encoding_dsv32.py in its repository), written here from the published format:

        <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜></think>{reply}<｜end▁of▁sentence｜>
        <｜User｜>{user}<｜Assistant｜><think>        (thinking mode; </think> in chat mode)

    The beginning-of-sentence token opens the prompt (add_bos); system turns go in as they are; each
    earlier assistant turn is written without its reasoning (the thinking of earlier turns is
    dropped) and closed by the end-of-sentence token; the prompt ends after the last user turn with
    <think> when thinking, else </think>. Tool turns are not supported."""

    BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def render(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = True, thinking: bool = False,
               add_bos: bool = True, **kwargs: Any) -> str:
        if kwargs:
            raise ChatTemplateError(f"DeepSeek-V3.2's encoder takes thinking and add_bos, not {sorted(kwargs)}")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} objects")
        text = self.BOS if add_bos else ""
        for i, m in enumerate(messages):
            role, content = m.get("role"), m.get("content", "")
            if not isinstance(content, str):
                raise ChatTemplateError(f"messages[{i}].content must be text for DeepSeek-V3.2's encoder")
            if role == "system":
                text += content
            elif role == "user":
                text += self.USER + content + self.ASSISTANT
            elif role == "assistant":
                if i == 0 or messages[i - 1].get("role") != "user":
                    raise ChatTemplateError(f"messages[{i}]: an assistant turn must follow a user turn")
                text += "</think>" + content + self.EOS  # its reasoning_content, if any, is dropped
            else:
                raise ChatTemplateError(f"messages[{i}]: the role {role!r} is not supported by DeepSeek-V3.2's encoder")
        if add_generation_prompt:
            if not messages or messages[-1].get("role") != "user":
                raise ChatTemplateError("the conversation must end with a user turn to prompt the assistant")
            text += "<think>" if thinking else "</think>"
        elif messages and messages[-1].get("role") == "user":
            text = text[:-len(self.ASSISTANT)]  # no prompt: the last user turn stands alone
        return text


def _special_tokens(config: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


def load_chat_template(model_dir: Path, override: Optional[Path] = None) -> Optional[Any]:
    """The template to render chat requests with (a ChatTemplate, or DeepSeek-V3.2's encoder for a
    deepseek_v32 checkpoint that ships no template), or None when the checkpoint has none."""
    model_dir = Path(model_dir)
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    variables = _special_tokens(config)
    if override is not None:
        return ChatTemplate(Path(override).read_text(), variables, str(override))
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return ChatTemplate(jinja.read_text(), variables, str(jinja))
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if isinstance(template, str):
        return ChatTemplate(template, variables, str(config_path))
    model_config = model_dir / "config.json"
    if model_config.is_file() and json.loads(model_config.read_text()).get("model_type") == "deepseek_v32":
        return DeepSeekV32Encoder("DeepSeek-V3.2's chat format (mtpspec._chat.DeepSeekV32Encoder)")
    return None
