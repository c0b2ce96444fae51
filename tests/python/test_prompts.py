"""Prompt sets (mtpspec.prompts): the common JSONL layouts load, every fault names the file and line,
multi-turn items put the model's reply back before the next turn, and the per-category statistics
add up to the whole run's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mtpspec
from mtpspec.prompts import PromptSetError, category_stats, load_prompt_set, run_prompt_set
from conftest import ROOT, THREADS

TRAINED = ROOT / "models" / "glm-tiny-mtp"


def write(path: Path, lines) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_the_common_layouts_load(tmp_path: Path) -> None:
    items = load_prompt_set(write(tmp_path / "mixed.jsonl", [
        {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
        {"category": "coding", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "def f"}]},
        {"task_id": "HumanEval/0", "prompt": "def add(a, b):"},
        {"prompt": "Once upon a time"},
        "",
    ]))
    assert [(i.id, i.category, i.turns) for i in items] == [
        ("81", "writing", ["Write a poem.", "Shorter."]), ("2", "coding", ["def f"]),
        ("HumanEval/0", "humaneval", ["def add(a, b):"]), ("4", "default", ["Once upon a time"])]
    assert items[0].source.endswith("mixed.jsonl:1")
    assert [i.id for i in load_prompt_set(tmp_path / "mixed.jsonl", categories=["coding", "writing"])] == ["81", "2"]


@pytest.mark.parametrize("lines, message", [
    (["{not json"], r"bad.jsonl:1: not JSON"),
    ([{"category": "x"}], r"bad.jsonl:1: the line has no turns, messages or prompt field"),
    ([{"prompt": "ok"}, {"category": "x", "turns": ["fine", " "]}], r"bad.jsonl:2: turn 1 is empty"),
    ([{"category": "x", "turns": []}], r"bad.jsonl:1: the prompt has no turns"),
    ([{"turns": ["no category"]}], r"bad.jsonl:1: the line has no category"),
    ([[1, 2]], r"bad.jsonl:1: a line must be a JSON object"),
    ([""], r"bad.jsonl: holds no prompts"),
])
def test_faults_name_the_file_and_line(tmp_path: Path, lines, message: str) -> None:
    with pytest.raises(PromptSetError, match=message):
        load_prompt_set(write(tmp_path / "bad.jsonl", lines))


def test_a_category_filter_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "set.jsonl", [{"category": "math", "turns": ["1+1"]}])
    with pytest.raises(PromptSetError, match=r"no prompt of categories \['poetry'\] \(it has \['math'\]\)"):
        load_prompt_set(path, categories=["poetry"])
    with pytest.raises(PromptSetError, match="missing.jsonl"):
        load_prompt_set(tmp_path / "missing.jsonl")


def test_multi_turn_replies_go_back_in_and_categories_add_up(tmp_path: Path) -> None:
    model = mtpspec.Model.load(TRAINED, threads=THREADS)
    items = load_prompt_set(write(tmp_path / "set.jsonl", [
        {"category": "story", "turns": ["Once upon a time", "And then"]},
        {"category": "code", "turns": ["def main(args):"]},
        {"category": "story", "turns": ["It is a truth universally acknowledged"]},
    ]))
    results = run_prompt_set(model, items, 24, k=3, stop_at_eos=False)
    first, second = results[0].replies
    # The second turn saw the first turn and the model's own reply to it.
    context = "Once upon a time" + first.text + "\n\nAnd then"
    assert second.tokens == model.generate(context, 24, k=3, stop_at_eos=False).tokens
    stats = category_stats(results)
    assert set(stats) == {"story", "code", "all"}
    assert stats["story"]["requests"] == 3 and stats["code"]["requests"] == 1 and stats["all"]["requests"] == 4
    for name in ("generated_tokens",):
        assert stats["story"][name] + stats["code"][name] == stats["all"][name]
    all_stats = [r.stats for item in results for r in item.replies]
    drafts = sum(s.num_drafts for s in all_stats)
    accepted = sum(s.num_accepted_tokens for s in all_stats)
    assert stats["all"]["mean_acceptance_length_token_weighted"] == pytest.approx(1 + accepted / drafts)
    # The unconditional per-position rates sum to the mean accepted drafts per step; each
    # conditional rate is at least the unconditional one.
    assert sum(stats["all"]["per_position_unconditional"]) == pytest.approx(accepted / drafts)
    assert all(c >= u - 1e-12 for c, u in zip(stats["all"]["per_position_conditional"],
                                               stats["all"]["per_position_unconditional"]))
    assert sum(stats["all"]["accepted_histogram"]) == drafts
    assert np.isfinite(stats["all"]["tokens_per_second"]) and stats["all"]["tokens_per_second"] > 0


PROMPT_SET = [
    {"question_id": 1, "category": "story", "turns": ["Once upon a time", "And then"]},
    {"question_id": 2, "category": "code", "turns": ["def main(args):"]},
    {"task_id": "HumanEval/0", "prompt": "def add(a, b):"},
    {"question_id": 4, "category": "story", "turns": ["It is a truth universally acknowledged", "Go on", "More"]},
]


@pytest.mark.parametrize("batch", [None, "2"])
def test_the_cli_runs_a_prompt_set_as_python_does(cli: Path, tmp_path: Path, batch) -> None:
    """`mtpspec generate --prompts-file SET.jsonl` gives every turn the tokens run_prompt_set gives it
    (raw text, replies put back), in a series or a batch, and per-category statistics that equal
    category_stats' and add up to the aggregate."""
    path = write(tmp_path / "set.jsonl", PROMPT_SET)
    out = tmp_path / "stats.json"
    command = [str(cli), "generate", str(TRAINED), "--prompts-file", str(path), "--max-new", "20", "--k", "3",
               "--temperature", "0.8", "--seed", "5", "--threads", str(THREADS), "--stats-json", str(out)]
    r = subprocess.run(command + (["--batch", batch] if batch else []), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    model = mtpspec.Model.load(TRAINED, threads=THREADS)
    results = run_prompt_set(model, load_prompt_set(path), 20, k=3, temperature=0.8, seed=5)
    expected = {(res.item.id, t + 1): reply.tokens for res in results for t, reply in enumerate(res.replies)}
    assert {(q["id"], q["turn"]): q["tokens"] for q in doc["requests"]} == expected
    assert len(doc["requests"]) == 7 and "== category story" in r.stdout
    stats = category_stats(results)
    assert set(doc["categories"]) == {"story", "code", "humaneval"}
    for name, category in doc["categories"].items():
        assert category["mean_acceptance_length"] == pytest.approx(stats[name]["mean_acceptance_length_token_weighted"])
        assert category["generated_tokens"] == stats[name]["generated_tokens"]
        assert category["requests"] == stats[name]["requests"]
        assert category["mean_acceptance_length_token_weighted"] == pytest.approx(
            stats[name]["mean_acceptance_length_token_weighted"])
        assert category["mean_acceptance_length_per_request"] == pytest.approx(
            stats[name]["mean_acceptance_length_per_request"])
        assert category["conditional_acceptance_rate"] == pytest.approx(stats[name]["per_position_conditional"])
    assert sum(c["num_drafts"] for c in doc["categories"].values()) == doc["aggregate"]["num_drafts"]
    assert sum(c["num_accepted_tokens"] for c in doc["categories"].values()) == doc["aggregate"]["num_accepted_tokens"]


def test_prompt_set_errors_from_the_cli(cli: Path, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(cli), "generate", str(TRAINED), "--threads", str(THREADS), *args],
                              capture_output=True, text=True, timeout=300)

    bad = write(tmp_path / "bad.jsonl", [{"category": "x", "turns": ["fine"]}, {"category": "x", "turns": [""]}])
    r = run("--prompts-file", str(bad))
    assert r.returncode != 0 and "bad.jsonl:2: turn 0 is empty or not text" in r.stderr
    good = write(tmp_path / "set.jsonl", PROMPT_SET)
    r = run("--prompts-file", str(good), "--categories", "poetry")
    assert r.returncode != 0 and "no prompt of categories ['poetry']" in r.stderr
    text = tmp_path / "lines.txt"
    text.write_text("a prompt\n")
    r = run("--prompts-file", str(text), "--categories", "story")
    assert r.returncode != 0 and "--categories chooses from a prompt set" in r.stderr
    # A turn that does not fit fails alone, naming its line and turn; the other requests finish.
    out = tmp_path / "stats.json"
    r = run("--prompts-file", str(good), "--categories", "story,code", "--capacity", "40", "--max-new", "16",
            "--stats-json", str(out))
    doc = json.loads(out.read_text())
    assert r.returncode != 0 and "requests failed (the others finished" in r.stderr
    assert any(e.startswith(f"{good}:4 turn") for e in doc["errors"])
    assert {q["category"] for q in doc["requests"]} == {"story", "code"} and len(doc["requests"]) >= 2


def test_a_chat_formatted_run_puts_the_replies_back_as_messages(tmp_path: Path) -> None:
    """On a checkpoint with a chat template, run_prompt_set(chat=True) sends every turn as chat messages
    with the earlier replies as assistant messages, through the template."""
    model_dir = tmp_path / "templated"
    shutil.copytree(TRAINED, model_dir)
    shutil.copyfile(ROOT / "research" / "chat" / "glm_style.jinja", model_dir / "chat_template.jinja")
    model = mtpspec.Model.load(model_dir, threads=THREADS)
    items = load_prompt_set(write(tmp_path / "set.jsonl", [{"category": "story", "turns": ["Tell a tale", "Go on"]}]))
    kwargs = {"enable_thinking": False}
    first, second = run_prompt_set(model, items, 16, chat=True, chat_template_kwargs=kwargs, k=2)[0].replies
    messages = [{"role": "user", "content": "Tell a tale"}]
    assert first.tokens == model.generate(messages=messages, max_new_tokens=16, chat_template_kwargs=kwargs, k=2).tokens
    messages += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Go on"}]
    assert second.tokens == model.generate(messages=messages, max_new_tokens=16, chat_template_kwargs=kwargs,
                                           k=2).tokens
    # ... which is the rendered conversation as raw text.
    rendered = model.apply_chat_template(messages, enable_thinking=False)
    assert rendered.endswith("<|assistant|></think>") and "Go on" in rendered
    assert second.tokens == model.generate(rendered, 16, k=2).tokens


def test_speed_bench_parquet_loads_and_converts_for_the_cli(cli: Path, tmp_path: Path) -> None:
    """SPEED-Bench's prepared parquet (question_id, category, turns, and its other columns) reads as
    the JSONL layouts do; `python -m mtpspec.prompts` writes it as JSONL that the CLI runs; an
    unprepared file (turns still holding the placeholder) is an error naming the row."""
    import pyarrow as pa  # tests/python/requirements.txt
    import pyarrow.parquet as pq

    table = pa.table({"question_id": ["q1", "q2"], "category": ["coding", "rag"],
                      "turns": [["def f(x):", "Now add a docstring."], ["Summarise: the cat sat."]],
                      "source": ["a", "b"], "src_id": ["a_1", "b_2"]})
    path = tmp_path / "test.parquet"
    pq.write_table(table, path)
    items = load_prompt_set(path)
    assert [(i.id, i.category, i.turns) for i in items] == [
        ("q1", "coding", ["def f(x):", "Now add a docstring."]), ("q2", "rag", ["Summarise: the cat sat."])]
    assert items[1].source == f"{path}:2"
    out = tmp_path / "speed.jsonl"
    r = subprocess.run([sys.executable, "-m", "mtpspec.prompts", str(path), str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [(i.id, i.category, i.turns) for i in load_prompt_set(out)] == [(i.id, i.category, i.turns) for i in items]
    stats = tmp_path / "stats.json"
    r = subprocess.run([str(cli), "generate", str(TRAINED), "--prompts-file", str(out), "--max-new", "8",
                        "--threads", str(THREADS), "--stats-json", str(stats)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert set(json.loads(stats.read_text())["categories"]) == {"coding", "rag"}
    r = subprocess.run([str(cli), "generate", str(TRAINED), "--prompts-file", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "python -m mtpspec.prompts" in r.stderr

    unprepared = tmp_path / "unprepared.parquet"
    pq.write_table(pa.table({"question_id": ["q1", "q2"], "category": ["qa", "rag"], "turns": [
        ["fine"], ["FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH\n\nx"]]}), unprepared)
    with pytest.raises(PromptSetError, match=r"unprepared.parquet:2: turn 0 is SPEED-Bench's placeholder"):
        load_prompt_set(unprepared)
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(PromptSetError, match="broken.parquet: not a readable parquet table"):
        load_prompt_set(tmp_path / "broken.parquet")


def test_a_turn_ended_by_eos_goes_back_without_it_in_the_cli_as_in_python(cli: Path, tmp_path: Path) -> None:
    """The EOS id that ends a reply is not part of the text the next turn sees, in the CLI as in Python."""
    model = mtpspec.Model.load(TRAINED, threads=THREADS)
    first = model.generate("Once upon a time", 12, k=2, stop_at_eos=False)
    eos = first.tokens[4]  # a token the first reply reaches: as EOS it ends that reply early
    items = [{"question_id": 1, "category": "story", "turns": ["Once upon a time", "And then"]}]
    path = write(tmp_path / "set.jsonl", items)
    results = run_prompt_set(model, load_prompt_set(path), 12, k=2, eos_token_id=[eos])
    assert results[0].replies[0].stop_reason == "eos"
    out = tmp_path / "stats.json"
    r = subprocess.run([str(cli), "generate", str(TRAINED), "--prompts-file", str(path), "--max-new", "12", "--k", "2",
                        "--eos-ids", str(eos), "--threads", str(THREADS), "--stats-json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [q["tokens"] for q in json.loads(out.read_text())["requests"]] == [x.tokens for x in results[0].replies]
