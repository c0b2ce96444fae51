"""The model types without a DSA indexer through the command line: `make-checkpoint --like
glm-4.7-flash|deepseek-v3` writes a cut of the release that `info` describes (no indexer, the MTP
layer's copies, the chaining default, the full release's published total), and the options that
only concern the indexer are refused with the model type named."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, THREADS

GLM47 = ROOT / "tests" / "golden" / "glm47_c"


def run(cli: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *args, "--threads", str(THREADS)], capture_output=True, text=True)


@pytest.mark.parametrize("like, layers, experts, total", [
    ("glm-4.7-flash", "2", "4", "31,221,488,576 parameters, the MTP layer and its copies included\n"),
    ("deepseek-v3", "4", "16", "684,489,845,504 parameters, the MTP layer and its copies included; "
                              "684,531,386,000 with the FP8 block scales\n"),
])
def test_info_on_a_cut_release(cli: Path, tmp_path: Path, like: str, layers: str, experts: str, total: str) -> None:
    out = tmp_path / like
    made = run(cli, "make-checkpoint", str(out), "--like", like, "--layers", layers, "--experts", experts,
               "--fill", "zeros")
    assert made.returncode == 0, made.stderr
    info = run(cli, "info", str(out))
    assert info.returncode == 0, info.stderr
    text = info.stdout
    assert "indexer        none: " in text
    assert "layers (F/S)" not in text
    assert "attention      dense at every length" in text
    assert "own embed" in text and "own head" in text
    assert "mtp chain      raw state carried for k > 1 by default" in text
    assert f"release total  {total}" in text


def test_info_says_whether_the_copies_equal_the_trunks(cli: Path) -> None:
    # The glm47_c golden model's copies are its own random tensors; dsv3_d's equal the trunk's.
    glm = run(cli, "info", str(GLM47))
    assert glm.returncode == 0, glm.stderr
    assert "own embed (differs from the trunk's), own head (differs from the trunk's)" in glm.stdout
    dsv3 = run(cli, "info", str(ROOT / "tests" / "golden" / "dsv3_d"))
    assert dsv3.returncode == 0, dsv3.stderr
    assert "own embed (equal to the trunk's), own head (equal to the trunk's)" in dsv3.stdout


@pytest.mark.parametrize("args, message", [
    (["logits", "--ids", "1,2,3", "--out", "OUT", "--index-keys", "bf16"], "index keys bf16: "),
    (["generate", "--ids", "1,2,3", "--max-new", "4", "--mtp-index-share", "shared"],
     "--mtp-index-share shared: glm4_moe_lite has no DSA indexer"),
    (["logits", "--ids", "1,2,3", "--out", "OUT", "--path", "gather"],
     "--path gather selects keys with the DSA indexer, which glm4_moe_lite does not have"),
])
def test_indexer_options_are_refused_by_name(cli: Path, tmp_path: Path, args: list, message: str) -> None:
    args = [str(tmp_path / "x.npy") if a == "OUT" else a for a in args]
    r = run(cli, args[0], str(GLM47), *args[1:])
    assert r.returncode == 1
    assert message in r.stderr
    if "--index-keys" in args:
        assert "glm4_moe_lite model, which has no DSA indexer" in r.stderr


def test_synthetic_rate_forms_from_the_command_line(cli: Path) -> None:
    """The three forms of synthetic rates reach the same rule: unconditional 1.0, 0.5 is conditional
    1.0, 0.5, and a mean accepted length of 2.5 at k = 2 is vLLM's [1, 0.5]: the three runs accept
    the same drafts."""
    outputs = []
    for form in (["--synthetic-rates", "1,0.5"], ["--synthetic-rates-unconditional", "1,0.5"],
                 ["--synthetic-acceptance-length", "2.5"]):
        r = run(cli, "generate", str(GLM47), "--ids", "1,2,3", "--max-new", "24", "--k", "2", "--accept",
                "synthetic", *form)
        assert r.returncode == 0, r.stderr
        outputs.append([line for line in r.stdout.splitlines() if line.startswith(("tokens:", "accepted"))])
    assert outputs[0] == outputs[1] == outputs[2]
    rising = run(cli, "generate", str(GLM47), "--ids", "1,2,3", "--k", "2", "--accept", "synthetic",
                 "--synthetic-rates-unconditional", "0.4,0.6")
    assert rising.returncode == 1
    assert "--synthetic-rates-unconditional[1] = 0.6 rises" in rising.stderr
