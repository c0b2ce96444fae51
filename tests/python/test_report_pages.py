"""The results pages regenerate byte for byte: each page's generator (bench/report/) runs on the JSON
kept beside the page in docs/results/<page>-data/, with the command line scripts/reproduce_results.sh
(or the page's own script) gives it, and must write exactly the committed page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
REPORT = ROOT / "bench" / "report"


def decode(data: Path, out: Path) -> list[str]:
    return ["decode_report.py", "--runs", *(str(data / f"decode_{i}.json") for i in (1, 2, 3)), "--out", str(out)]


def results_page(script: str, command: str):
    def arguments(data: Path, out: Path) -> list[str]:
        return [script, "--results", str(data), "--out", str(out), "--command", command]
    return arguments


def real_scale(data: Path, out: Path) -> list[str]:
    return ["real_scale_report.py", "--release", "glm-5.2", "--layers", str(data / "real_scale_glm7.json"),
            "--release-2", "deepseek-v3.2", "--layers-2", str(data / "real_scale_dsv4.json"),
            "--memory", *(str(data / f"memory_{m}.json") for m in ("glm7_huge", "glm7_mapped", "glm2_bf16")),
            "--command", "scripts/reproduce_results.sh real-scale", "--out", str(out)]


def batch(data: Path, out: Path) -> list[str]:
    return ["batch_report.py", "--results", str(data), "--out", str(out)]


def tradeoff(data: Path, out: Path) -> list[str]:
    command = ("build/release/bench/tradeoff_bench --contexts 512,2048,8192,32768 --dense-context 0 --new-tokens 256 "
               "--reps 11 --e2e-reps 5 --g5-reps 9 --rates 0.7142857142857143,0.5434782608695652,0.589041095890411,"
               "0.5365853658536586,0.5238095238095238 --trained-dir models/glm-tiny-mtp --json "
               "build/results/tradeoff.json --csv build/results/tradeoff.csv   # built at 798b717")
    return ["report.py", "--tradeoff", str(data / "tradeoff.json"), "--out", str(out), "--date", "2026-12-01",
            "--tradeoff-cmd", command]


def acceptance(data: Path, out: Path) -> list[str]:
    command = ("build/release/bench/accept_bench --model models/glm-tiny-mtp --json build/results/accept.json "
               "--csv build/results/accept.csv")
    return ["report.py", "--accept", str(data / "acceptance.json"), "--out", str(out), "--accept-cmd", command]


def soak(data: Path, out: Path) -> list[str]:
    # The soak run is a test (tests/soak/soak.py); its page comes from the same renderer.
    return [str(ROOT / "tests" / "soak" / "soak.py"), "--from-json", str(data / "soak.json"), "--out", str(out),
            "--command", "build/pyenv/bin/python tests/soak/soak.py --requests 2000 --out docs/results"]


def llama_cpp(data: Path, out: Path) -> list[str]:
    # Without the checkpoints and GGUFs, the generator reads their facts from data/models.json.
    return ["llama_cpp_report.py", "--dir", str(data), "--command", "scripts/compare_llama_cpp.sh LLAMA_CPP_DIR 2",
            "--out", str(out / "llama-cpp.md")]


# page: the arguments of its generator, given a copy of its data folder and the folder to write into.
PAGES = {
    "acceptance": acceptance,
    "decode": decode,
    "serving": results_page("serving_report.py", "scripts/reproduce_results.sh serving"),
    "prompt-sets": results_page("prompt_sets_report.py", "scripts/reproduce_results.sh prompt-sets"),
    "numerics": results_page("numerics_report.py", "scripts/reproduce_results.sh numerics"),
    "glm-4.7-flash": results_page("glm47_flash_report.py", "scripts/compare_glm47_flash.sh LLAMA_CPP_DIR build/rs/glm47f"),
    "real-scale": real_scale,
    "batch": batch,
    "soak": soak,
    "tradeoff": tradeoff,
    "llama-cpp": llama_cpp,
}


@pytest.mark.parametrize("page", sorted(PAGES) + ["tree"])
def test_page_regenerates_from_its_kept_data(page: str, tmp_path: Path) -> None:
    data = tmp_path / "kept"
    shutil.copytree(RESULTS / f"{page}-data", data)
    out = tmp_path / "docs" / "results"
    out.mkdir(parents=True)
    if page == "tree":
        # The page names the command that wrote it, relative to the repository root.
        results = tmp_path / "build" / "results"
        results.mkdir(parents=True)
        shutil.copyfile(data / "tree.json", results / "tree.json")
        shutil.copyfile(data / "costs.json", results / "tree_costs.json")
        arguments = ["tree_report.py", "--from-json", "build/results/tree.json", "--tree-costs",
                     "build/results/tree_costs.json", "--out", "docs/results"]
    else:
        arguments = PAGES[page](data, out)
    run = subprocess.run([sys.executable, str(REPORT / arguments[0]), *arguments[1:]], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"})
    assert run.returncode == 0, run.stderr
    assert (out / f"{page}.md").read_bytes() == (RESULTS / f"{page}.md").read_bytes()
