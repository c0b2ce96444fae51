"""The request options are declared once (pipeline/options.h): the command line's help, the Python
signature of Model.generate, the stub of _ext.generate and the README list the same options with
the same defaults."""

from __future__ import annotations

import ast
import inspect
import subprocess
from pathlib import Path
from typing import Any, Dict

import mtpspec
from mtpspec import _ext
from conftest import ROOT

TABLE = _ext.request_options()

# Keywords that are Python objects rather than declarable values, or that shape a batch.
PYTHON_ONLY = {"acceptance_hook", "on_tokens", "adaptive_controller", "stop", "batch", "k_schedule", "per_request",
               "messages", "chat_template_kwargs", "prompt_or_ids"}


def python_default(option: Dict[str, str]) -> Any:
    text, kind = option["default"], option["type"]
    if text == "none":
        return None
    if kind == "bool":
        return {"true": True, "false": False}[text]
    if kind in ("int", "int | str"):
        return int(text)
    if kind == "float":
        return float(text)
    return text


def keyword_defaults(function: Any) -> Dict[str, Any]:
    return {p.name: p.default for p in inspect.signature(function).parameters.values()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is not p.empty}


def test_the_table_is_the_one_list() -> None:
    assert len(TABLE) == len({o["name"] for o in TABLE}) == len({o["flag"] for o in TABLE})
    for option in TABLE:
        assert option["flag"].startswith("--") and option["help"], option


def test_python_signature_matches_the_table() -> None:
    defaults = keyword_defaults(mtpspec.Model.generate)
    for option in TABLE:
        assert option["name"] in defaults, option["name"]
        assert defaults[option["name"]] == python_default(option), option["name"]
    extra = set(defaults) - {o["name"] for o in TABLE} - PYTHON_ONLY
    assert not extra, f"Model.generate takes options the table does not declare: {sorted(extra)}"


def test_stub_matches_the_table() -> None:
    tree = ast.parse((ROOT / "python" / "mtpspec" / "_ext.pyi").read_text())
    generate = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "generate")
    stub = {a.arg: ast.literal_eval(d) for a, d in zip(generate.args.kwonlyargs, generate.args.kw_defaults)}
    for option in TABLE:
        assert option["name"] in stub, option["name"]
        assert stub[option["name"]] == python_default(option), option["name"]
    assert not set(stub) - {o["name"] for o in TABLE} - PYTHON_ONLY


def test_cli_help_and_readme_list_every_option(cli: Path) -> None:
    help_text = subprocess.run([str(cli), "generate", "--help"], capture_output=True, text=True, check=True).stdout
    readme = (ROOT / "README.md").read_text()
    for option in TABLE:
        line = next((l for l in help_text.splitlines() if l.split()[:1] == [option["flag"]]), None)
        assert line is not None, option["flag"]
        assert line.endswith(f"(default {option['default']})"), line
        assert option["flag"] + " " in readme or option["flag"] + "]" in readme, option["flag"]


def test_the_same_fault_is_named_in_each_spelling(cli: Path, model: mtpspec.Model) -> None:
    r = subprocess.run([str(cli), "generate", str(ROOT / "tests" / "golden" / "glm_a"), "--ids", "1,2",
                        "--mtp-chain", "sideways"], capture_output=True, text=True)
    assert r.returncode == 1 and "--mtp-chain must be normed, raw or default" in r.stderr
    try:
        model.generate([1, 2], 4, mtp_chain="sideways")
    except ValueError as e:
        assert "mtp_chain must be normed, raw or default" in str(e)
    else:
        raise AssertionError("mtp_chain='sideways' was accepted")
