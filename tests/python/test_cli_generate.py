"""`mtpspec generate --prompts-file`: a series of requests on one loaded model, each identical to its
own plain run, with per-request and aggregated statistics, and its errors."""

from __future__ import annotations

import json
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
    prompts.write_text(PROMPTS[0] + "\n\n" + PROMPTS[1] + "\r\n" + PROMPTS[2] + "\n")  # blank lines skipped
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
    empty.write_text("\n\n")
    blank = run(cli, str(TRAINED), "--prompts-file", str(empty))
    assert blank.returncode != 0 and "empty.txt has no prompt lines" in blank.stderr
    no_tokenizer = run(cli, str(GLM_A), "--prompts-file", str(prompts))
    assert no_tokenizer.returncode != 0 and "tokenizer.json" in no_tokenizer.stderr
    # A request that fails names its line, e.g. a prompt longer than the cache.
    long = tmp_path / "long.txt"
    long.write_text("short\n\n" + "word " * 400 + "\n")  # line numbers count the blank line
    partial = tmp_path / "partial.json"
    too_long = run(cli, str(TRAINED), "--prompts-file", str(long), "--capacity", "64", "--max-new", "8",
                   "--stats-json", str(partial))
    assert too_long.returncode != 0 and "--prompts-file line 3: the prompt" in too_long.stderr
    # The requests before the failing one are kept: --stats-json is written as the series runs.
    kept = json.loads(partial.read_text())
    assert len(kept["requests"]) == 1 and 1 <= kept["requests"][0]["generated_tokens"] <= 8
    assert kept["aggregate"]["generated_tokens"] == kept["requests"][0]["generated_tokens"]
    assert kept["error"].startswith("--prompts-file line 3: the prompt")
    unwritable = run(cli, str(TRAINED), "--prompts-file", str(prompts), "--stats-json", str(tmp_path / "no" / "s.json"))
    assert unwritable.returncode != 0 and "s.json: cannot be written" in unwritable.stderr


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
    for bad, message in ((["--tree", "3,x"], "--tree must be a comma-separated list"),
                         (["--tree", "4,4"], "--tree: tree 4,4 has 20 draft nodes"),
                         (["--tree", "2", "--tree-nodes", "3"], "not both"),
                         (["--tree", "2", "--draft", "lookup"], "--tree needs --draft mtp")):
        r = run(cli, str(GLM_A), "--ids", ids, *bad)
        assert r.returncode != 0 and message in r.stderr, r.stderr
