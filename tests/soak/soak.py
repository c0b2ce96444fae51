#!/usr/bin/env python3
"""Soak: thousands of requests through one loaded model, from the CLI and from Python.

Two runs on the same model (default: the bundled trained model, whose tokenizer encodes the
prompts):

* **CLI.** ``mtpspec generate --prompts-file`` with N prompt lines, once with MTP drafting at
  k = 3 and T = 0.8 (a fixed k: at 24 new tokens ``--k auto`` would decode plainly), once with
  ``--draft none`` and the same sampling. Each request must equal its plain twin. The resident
  memory (VmRSS of the process) is read after request 100 and after request N, with the process paused.
* **Python.** ``Model.generate`` in a loop over N requests on one ``Model``, cycling drafters (mtp,
  lookup, hybrid), k (1, 2, 3, 5, "auto"), temperatures (0, 0.7, 1.0) and top-p, each compared with
  its plain twin (``draft="none"``, same sampling and seed). VmRSS is read after request 100 and at
  the end.

Either run fails (exit 1) if a request differs from its twin or if the final RSS is more than
``--max-growth`` (default 2%) above the RSS after the first 100 requests. The prompts are lines of
this repository's own documentation and sources, so they need no download.

  build/pyenv/bin/python tests/soak/soak.py [--model models/glm-tiny-mtp] [--requests 2000]
      [--max-new 24] [--cli build/release/cli/mtpspec] [--json build/results/soak.json]
      [--out docs/results]   (writes soak.md and soak-data/soak.json there)
  build/pyenv/bin/python tests/soak/soak.py --from-json docs/results/soak-data/soak.json \
      --out docs/results --command "..."   (the page of a kept run)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[2]


def rss_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc status")


def prompts(n: int) -> List[str]:
    """n prompt lines from the repository's docs and Python sources (cycled when there are fewer)."""
    lines: List[str] = []
    sources = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "docs" / "models.md"]
    sources += sorted((REPO / "research").rglob("*.py"))
    for path in sources:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if len(line) >= 12:
                lines.append(line[:240])
    if not lines:
        raise RuntimeError("no prompt lines found")
    return [lines[i % len(lines)] for i in range(n)]


def shown(argument: str) -> str:
    """An argument as a report shows it: repository paths relative, temporary files by name."""
    if not argument.startswith("/"):
        return argument
    path = Path(argument)
    return os.path.relpath(path, REPO) if REPO in path.parents else path.name


def cli_run(cli: Path, model: Path, prompt_file: Path, stats: Path, extra: List[str], threads: int,
            n: int) -> Dict[str, Any]:
    """Runs the CLI over the prompts file, reading VmRSS after request 100 and after the last one."""
    command = [str(cli), "generate", str(model), "--prompts-file", str(prompt_file), "--max-new",
               extra[0], "--stats-json", str(stats), "--threads", str(threads), *extra[1:]]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss: Dict[int, float] = {}
    assert process.stdout is not None
    for line in process.stdout:
        # The CLI flushes its output after each request. The process is paused while its RSS is read,
        # so the reading belongs to that point: the first 100 requests done, and (at "== all") the whole series
        # done with everything it built still held.
        index = int(line.split()[2]) if line.startswith("== request ") else n if line.startswith("== all ") else 0
        if index == 100 or (index == n and line.startswith("== all ")):
            os.kill(process.pid, signal.SIGSTOP)
            try:
                rss[index] = rss_mib(process.pid)
            finally:
                os.kill(process.pid, signal.SIGCONT)
    stderr = process.stderr.read() if process.stderr else ""
    if process.wait() != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {stderr}")
    return {"command": command, "seconds": time.perf_counter() - start, "rss_mib": rss,
            "requests": json.loads(stats.read_text())["requests"]}


def soak_cli(args: argparse.Namespace, texts: List[str]) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = Path(tmp) / "prompts.txt"
        prompt_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
        sampling = ["--temperature", "0.8", "--seed", "5"]
        spec = cli_run(args.cli, args.model, prompt_file, Path(tmp) / "spec.json",
                       [str(args.max_new), "--draft", "mtp", "--k", "3", *sampling], args.threads, len(texts))
        plain = cli_run(args.cli, args.model, prompt_file, Path(tmp) / "plain.json",
                        [str(args.max_new), "--draft", "none", *sampling], args.threads, len(texts))
    mismatches = [i for i, (a, b) in enumerate(zip(spec["requests"], plain["requests"])) if a["tokens"] != b["tokens"]]
    early, late = spec["rss_mib"].get(100), spec["rss_mib"].get(len(texts))
    drafted = sum(r["num_draft_tokens"] for r in spec["requests"])
    accepted = sum(r["num_accepted_tokens"] for r in spec["requests"])
    return {
        "requests": len(spec["requests"]), "mismatches": mismatches,
        "rss_after_100_mib": early, "rss_at_end_mib": late,
        "growth": (late / early - 1.0) if early and late else None,
        "generated_tokens": sum(r["generated_tokens"] for r in spec["requests"]),
        "draft_tokens": drafted, "accepted_tokens": accepted,
        "spec_seconds": spec["seconds"], "plain_seconds": plain["seconds"],
        "commands": [" ".join(shown(c) for c in run["command"]) for run in (spec, plain)],
    }


def soak_python(args: argparse.Namespace, texts: List[str]) -> Dict[str, Any]:
    import mtpspec  # the installed bindings (scripts/test_python.sh installs them into build/pyenv)

    model = mtpspec.Model.load(args.model, threads=args.threads)
    drafts = ["mtp", "lookup", "hybrid"]
    ks: List[Any] = [1, 2, 3, 5, "auto"]
    samplings = [dict(temperature=0.0), dict(temperature=0.7), dict(temperature=1.0, top_p=0.9)]
    mix = list(itertools.product(drafts, ks, samplings))
    mismatches: List[int] = []
    rss_after_100 = None
    drafted = accepted = generated = 0
    start = time.perf_counter()
    for i, text in enumerate(texts):
        draft, k, sampling = mix[i % len(mix)]
        options = dict(sampling, seed=i)
        spec = model.generate(text, args.max_new, draft=draft, k=k, **options)
        plain = model.generate(text, args.max_new, draft="none", **options)
        if spec.tokens != plain.tokens:
            mismatches.append(i)
        drafted += spec.stats.num_draft_tokens
        accepted += spec.stats.num_accepted_tokens
        generated += len(spec.tokens)
        if i + 1 == 100:
            rss_after_100 = rss_mib()
    rss_end = rss_mib()
    return {
        "requests": len(texts), "mismatches": mismatches, "rss_after_100_mib": rss_after_100,
        "rss_at_end_mib": rss_end, "growth": rss_end / rss_after_100 - 1.0 if rss_after_100 else None,
        "generated_tokens": generated, "draft_tokens": drafted, "accepted_tokens": accepted,
        "seconds": time.perf_counter() - start, "mix": f"{len(drafts)} drafters x k {ks} x {len(samplings)} samplings",
    }


def write_report(result: Dict[str, Any], out: Path, command: str) -> None:
    """soak.md (bench/report/templates/soak.md.j2, through the results pages' shared renderer) and
    soak-data/soak.json under `out`."""
    sys.path.insert(0, str(REPO / "bench" / "report"))
    from results_page import render, write_page  # noqa: E402  (bench/report/results_page.py)

    data = out / "soak-data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    write_page(out / "soak.md", render("soak.md.j2", result=result, command=command))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "glm-tiny-mtp")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--max-new", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cli", type=Path, default=REPO / "build" / "release" / "cli" / "mtpspec")
    parser.add_argument("--max-growth", type=float, default=0.02)
    parser.add_argument("--json", type=Path, default=REPO / "build" / "results" / "soak.json")
    parser.add_argument("--out", type=Path, default=None, help="write soak.md and soak-data/ here")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="write the page of a kept run (with --out and --command) instead of running")
    parser.add_argument("--command", default=None, help="with --from-json: the command the page names")
    args = parser.parse_args()
    if args.from_json is not None:
        if args.out is None or args.command is None:
            parser.error("--from-json needs --out and --command")
        write_report(json.loads(args.from_json.read_text()), args.out, args.command)
        return 0
    if args.requests < 101:
        parser.error("--requests must be > 100 (the RSS baseline is taken after request 100)")
    texts = prompts(args.requests)
    result: Dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "model": os.path.relpath(args.model, REPO), "max_new": args.max_new, "max_growth": args.max_growth,
    }
    result["cli"] = soak_cli(args, texts)
    result["python"] = soak_python(args, texts)
    failures = []
    for name in ("cli", "python"):
        r = result[name]
        if r["mismatches"]:
            failures.append(f"{name}: {len(r['mismatches'])} requests differ from plain (first {r['mismatches'][:5]})")
        if r["growth"] is None or r["growth"] > args.max_growth:
            failures.append(f"{name}: RSS grew {r['growth']} after the first 100 requests")
    result["verdict"] = "; ".join(failures) if failures else (
        "every request equals its plain twin, and RSS stays within the limit in both runs")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("cli", "python")}, indent=2))
    for name in ("cli", "python"):
        r = result[name]
        print(f"{name}: {r['requests']} requests, {len(r['mismatches'])} differ, RSS {r['rss_after_100_mib']:.1f} -> "
              f"{r['rss_at_end_mib']:.1f} MiB ({100 * r['growth']:+.2f}%)")
    if args.out is not None:
        command = "build/pyenv/bin/python tests/soak/soak.py " + " ".join(shown(a) for a in sys.argv[1:])
        write_report(result, args.out, command.strip())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
