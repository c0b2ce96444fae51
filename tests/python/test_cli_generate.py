"""`mtpspec generate --prompts-file`: a series of requests on one loaded model, each identical to its
own plain run, with per-request and aggregated statistics, and its errors."""

from __future__ import annotations

import json
from typing import Dict
import subprocess
from pathlib import Path

import pytest

from conftest import GLM_A, ROOT, THREADS

TRAINED = ROOT / "models" / "glm-tiny-mtp"
PROMPTS = ["It is a truth universally acknowledged, that a single man",
           "In the beginning God created the heaven",
           "def main(args):  # entry point"]


def run(cli: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), "generate", *args, "--threads", str(THREADS)], capture_output=True, text=True)


@pytest.mark.parametrize("k", ["3", "auto"])
def test_each_request_of_a_series_equals_its_plain_run(cli: Path, tmp_path: Path, k: str) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(PROMPTS[0] + "\n" + PROMPTS[1] + "\r\n" + PROMPTS[2] + "\n")  # CRLF line ends too
    stats = tmp_path / "stats.json"
    new = "220" if k == "auto" else "40"  # a fresh adaptive-k controller probes only in requests of >= ~200 tokens
    r = run(cli, str(TRAINED), "--prompts-file", str(prompts), "--max-new", new, "--k", k, "--temperature", "0.8",
            "--seed", "5", "--stats-json", str(stats))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("== request ") == 3 and "== all 3 requests" in r.stdout
    j = json.loads(stats.read_text())
    assert len(j["requests"]) == 3
    for prompt, request in zip(PROMPTS, j["requests"]):
        plain_stats = tmp_path / "plain.json"
        plain = run(cli, str(TRAINED), "--prompt", prompt, "--max-new", new, "--draft", "none", "--temperature", "0.8",
                    "--seed", "5", "--stats-json", str(plain_stats))
        assert plain.returncode == 0, plain.stderr
        expected = json.loads(plain_stats.read_text())
        assert request["tokens"] == expected["tokens"]
        assert request["text"] == expected["text"]
    total = j["aggregate"]
    assert total["generated_tokens"] == sum(q["generated_tokens"] for q in j["requests"])
    assert total["num_drafts"] == sum(q["num_drafts"] for q in j["requests"])
    assert total["num_accepted_tokens"] == sum(q["num_accepted_tokens"] for q in j["requests"])
    assert total["prompt_tokens"] == sum(q["prompt_tokens"] for q in j["requests"])
    if k == "3":
        assert total["num_drafts"] > 0


def test_prompts_file_errors(cli: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\ntwo\n")
    both = run(cli, str(TRAINED), "--prompts-file", str(prompts), "--prompt", "x")
    assert both.returncode != 0 and "exactly one of --ids, --prompt and --prompts-file" in both.stderr
    missing = run(cli, str(TRAINED), "--prompts-file", str(tmp_path / "absent.txt"))
    assert missing.returncode != 0 and "absent.txt: cannot be opened" in missing.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    nothing = run(cli, str(TRAINED), "--prompts-file", str(empty))
    assert nothing.returncode != 0 and "empty.txt has no prompt lines" in nothing.stderr
    gap = tmp_path / "gap.txt"
    gap.write_text("one\n\nthree\n")
    blank = run(cli, str(TRAINED), "--prompts-file", str(gap))
    assert blank.returncode != 0 and "gap.txt line 2 is empty" in blank.stderr
    no_tokenizer = run(cli, str(GLM_A), "--prompts-file", str(prompts))
    assert no_tokenizer.returncode != 0 and "tokenizer.json" in no_tokenizer.stderr
    # A request that fails names its line, e.g. a prompt longer than the cache.
    long = tmp_path / "long.txt"
    long.write_text("short\nsecond\n" + "word " * 400 + "\n")
    partial = tmp_path / "partial.json"
    too_long = run(cli, str(TRAINED), "--prompts-file", str(long), "--capacity", "64", "--max-new", "8",
                   "--stats-json", str(partial))
    assert too_long.returncode != 0 and "--prompts-file line 3: the prompt" in too_long.stderr
    # The requests before the failing one are kept: --stats-json is written as the series runs.
    kept = json.loads(partial.read_text())
    assert len(kept["requests"]) == 2 and 1 <= kept["requests"][0]["generated_tokens"] <= 8
    assert kept["aggregate"]["generated_tokens"] == sum(q["generated_tokens"] for q in kept["requests"])
    assert kept["error"].startswith("--prompts-file line 3: the prompt")
    unwritable = run(cli, str(TRAINED), "--prompts-file", str(prompts), "--stats-json", str(tmp_path / "no" / "s.json"))
    assert unwritable.returncode != 0 and "s.json: cannot be written" in unwritable.stderr


@pytest.mark.parametrize("batch", ["1", "3"])
def test_a_batch_gives_each_request_the_tokens_it_gets_alone(cli: Path, tmp_path: Path, batch: str) -> None:
    """--batch B runs the prompts B at a time with one verify forward per cycle: every request's
    tokens equal its run in a series (one at a time), and the batch statistics add up."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS + ["Once upon a time there was", "The cat sat on"]) + "\n")
    series_stats, batch_stats = tmp_path / "series.json", tmp_path / "batch.json"
    common = ["--prompts-file", str(prompts), "--max-new", "40", "--k", "3", "--temperature", "0.8", "--seed", "5"]
    series = run(cli, str(TRAINED), *common, "--stats-json", str(series_stats))
    assert series.returncode == 0, series.stderr
    batched = run(cli, str(TRAINED), *common, "--batch", batch, "--stats-json", str(batch_stats))
    assert batched.returncode == 0, batched.stderr
    assert f"== all 5 requests, {batch} at a time" in batched.stdout and "rows per forward" in batched.stdout
    s, b = json.loads(series_stats.read_text()), json.loads(batch_stats.read_text())
    assert [q["tokens"] for q in b["requests"]] == [q["tokens"] for q in s["requests"]]
    stats = b["batch"]
    assert stats["requests"] == 5 and stats["failed"] == 0 and stats["slots"] == int(batch)
    assert stats["generated_tokens"] == sum(len(q["tokens"]) for q in b["requests"])
    assert stats["verify_rows"] == sum(q["verify_steps"] + q["num_draft_tokens"] for q in b["requests"])
    assert stats["forwards"] == stats["cycles"] == stats["batched_forwards"]
    assert 0 < stats["experts_read"] <= stats["expert_choices"]
    assert max(q["slot"] for q in b["requests"]) == int(batch) - 1
    if batch == "3":
        assert stats["mean_batch"] > 1 and stats["experts_read"] < stats["expert_choices"]


def test_batch_errors(cli: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\ntwo\n")
    for bad, message in ((["--batch", "0"], "--batch must be >= 1, got 0"),
                         (["--batch", "x"], "--batch"),
                         (["--batch", "100000000000"], "more than the"),
                         (["--batch", "2", "--k-schedule", "1:3,x"], "--k-schedule must be a list of B:k pairs"),
                         (["--batch", "2", "--k-schedule", "4:3,2:1"], "k_schedule[1]: max_batch = 2"),
                         (["--batch", "2", "--k-schedule", "4:3", "--k", "auto"], "conflicts with --k auto"),
                         (["--k-schedule", "4:3"], "--k-schedule needs --batch B")):
        r = run(cli, str(TRAINED), "--prompts-file", str(prompts), *bad)
        assert r.returncode != 0 and message in r.stderr, (bad, r.stderr)
    # Memory: the error says what the batch would need.
    r = run(cli, str(TRAINED), "--prompts-file", str(prompts), "--batch", "100000000000")
    assert "GiB of cache" in r.stderr and "per slot" in r.stderr
    # A prompt too long for the cache fails alone, named by its line; the others finish.
    long = tmp_path / "long.txt"
    long.write_text("short\n" + "word " * 400 + "\nthird line\n")
    stats = tmp_path / "stats.json"
    r = run(cli, str(TRAINED), "--prompts-file", str(long), "--batch", "2", "--capacity", "64", "--max-new", "8",
            "--stats-json", str(stats))
    assert r.returncode != 0 and "--prompts-file line 2: the prompt" in r.stderr
    assert "1 of 3 requests failed" in r.stderr
    j = json.loads(stats.read_text())
    assert len(j["requests"]) == 2 and all(1 <= q["generated_tokens"] <= 8 for q in j["requests"])
    assert j["errors"][0].startswith("--prompts-file line 2: the prompt") and j["batch"]["failed"] == 1


def test_stop_ids_eos_override_and_logprobs(cli: Path, tmp_path: Path) -> None:
    ids = "5,17,42,99,3,250,7"
    full_stats = tmp_path / "full.json"
    full = run(cli, str(GLM_A), "--ids", ids, "--max-new", "30", "--eos-ids", "", "--logprobs", "true",
               "--stats-json", str(full_stats))
    assert full.returncode == 0, full.stderr
    j = json.loads(full_stats.read_text())
    tokens = j["tokens"]
    assert len(tokens) == 30 and j["stop_reason"] == "max_new_tokens"
    assert len(j["logprobs"]) == 30 and all(lp <= 0 for lp in j["logprobs"])
    assert "logprobs: " in full.stdout
    ending = tokens[9]
    m = tokens.index(ending)
    for flag, reason, rest in [("--stop-ids", "stop_token", ["--eos-ids="]), ("--eos-ids", "eos", [])]:
        stats = tmp_path / "stop.json"
        r = run(cli, str(GLM_A), "--ids", ids, "--max-new", "30", flag, str(ending), *rest, "--stats-json", str(stats))
        assert r.returncode == 0, r.stderr
        s = json.loads(stats.read_text())
        assert s["tokens"] == tokens[:m + 1] and s["stop_reason"] == reason
        assert "logprobs" not in s
        bad = run(cli, str(GLM_A), "--ids", ids, flag, "3,256")
        assert bad.returncode != 0 and f"{flag}[1] = 256 is outside the vocabulary [0, 256)" in bad.stderr
    bad = run(cli, str(GLM_A), "--ids", ids, "--logprobs", "yes")
    assert bad.returncode != 0 and "--logprobs" in bad.stderr


def test_tree_drafting_from_the_cli(cli: Path, tmp_path: Path) -> None:
    """--tree and --tree-nodes: the output equals plain decoding, and the statistics name the tree."""
    ids = "5,17,42,99,3,250,7,64"
    plain_stats, tree_stats = tmp_path / "plain.json", tmp_path / "tree.json"
    plain = run(cli, str(GLM_A), "--ids", ids, "--max-new", "30", "--draft", "none", "--temperature", "0.8",
                "--seed", "4", "--stats-json", str(plain_stats))
    assert plain.returncode == 0, plain.stderr
    for shape in (["--tree", "3,2,1"], ["--tree-nodes", "6"]):
        tree = run(cli, str(GLM_A), "--ids", ids, "--max-new", "30", *shape, "--temperature", "0.8", "--seed", "4",
                   "--stats-json", str(tree_stats))
        assert tree.returncode == 0, tree.stderr
        j = json.loads(tree_stats.read_text())
        assert j["tokens"] == json.loads(plain_stats.read_text())["tokens"]
        assert j["tree"] == ("3,2,1" if shape[0] == "--tree" else "nodes=6")
        assert sum(j["num_accepted_tokens_per_sibling_rank"]) == j["num_accepted_tokens"]
        assert "tree " in tree.stdout and "accepted by sibling rank" in tree.stdout
    for bad, message in ((["--tree", "3,x"], "--tree must be comma-separated integers"),
                         (["--tree", "4,4"], "--tree: tree 4,4 has 20 draft nodes"),
                         (["--tree", "2", "--tree-nodes", "3"], "not both"),
                         (["--tree", "2", "--draft", "lookup"], "--tree needs --draft mtp")):
        r = run(cli, str(GLM_A), "--ids", ids, *bad)
        assert r.returncode != 0 and message in r.stderr, r.stderr


def test_stop_strings_from_the_cli_equal_python(cli: Path) -> None:
    """--stop ends the request where its text holds the string, as Model.generate(stop=...) does (the
    same pipeline/stop_strings.h); the CLI prints the text before it."""
    import mtpspec

    model = mtpspec.Model.load(TRAINED, threads=THREADS)
    plain = model.generate(PROMPTS[0], 40, stop_at_eos=False)
    stop = plain.text[6:9]
    ours = model.generate(PROMPTS[0], 40, stop_at_eos=False, stop=stop)
    r = run(cli, str(TRAINED), "--prompt", PROMPTS[0], "--max-new", "40", "--stop-at-eos", "false", "--stop", stop)
    assert r.returncode == 0, r.stderr
    lines: Dict[str, str] = {}
    for line in r.stdout.splitlines():  # the first of each (the summary has a "tokens: prompt ..." line too)
        if line.startswith(("tokens: ", "stop: ")):
            lines.setdefault(*line.split(": ", 1))
    assert lines["stop"] == "stop_string" == ours.stop_reason
    assert [int(t) for t in lines["tokens"].split(",")] == ours.tokens
    assert f"text: {ours.text}\n" in r.stdout
    bad = run(cli, str(TRAINED), "--ids", "1,2", "--stop", "x")
    assert bad.returncode == 1 and "--stop needs a text prompt" in bad.stderr
