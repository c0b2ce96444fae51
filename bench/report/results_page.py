"""What the results pages' generators share: their arguments, the loading of a run's JSON (copied
beside the page), the rendering of a page's template (bench/report/templates/), the row of an
accuracy comparison (`numerics_bench --variant`), and the table of a side-by-side decode run.

A page is a generator that computes its numbers from the JSON and a template that holds its prose
and table layout; the templates format the numbers with the filters below."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from statistics import median
from typing import Callable

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"


def page_arguments(doc: str | None) -> argparse.Namespace:
    """--results (the JSON, default build/results), --command (repeatable), --out (docs/results)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("build/results"))
    parser.add_argument("--command", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    return parser.parse_args()


def json_loader(results: Path, data_dir: Path) -> Callable[[str], dict | None]:
    """Empties data_dir and returns load(name): results/name parsed (None when absent), copied into
    data_dir so that the page's data sits beside it."""
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)

    def load(name: str) -> dict | None:
        path = results / name
        if not path.exists():
            return None
        shutil.copyfile(path, data_dir / name)
        return json.loads(path.read_text())

    return load


def page_run(doc: str | None, data_folder: str, name: str, bench: str) -> tuple[argparse.Namespace, dict]:
    """The page's arguments and the run `name` from --results (copied into --out/data_folder); a
    missing run stops the generator, naming `bench`, which writes it."""
    args = page_arguments(doc)
    run = json_loader(args.results, args.out / data_folder)(name)
    if run is None:
        raise SystemExit(f"{args.results}/{name} is missing: run {bench} first")
    return args, run


def _fixed(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


# The number formats of the pages: `x|fixed(2)` is 1.23, `x|sci(1)` 1.2e-03, `x|percent(1)` 12.3%,
# `x|signed(4)` +0.0012, `x|g` 0.7, `x|commas` 2,304, `xs|fixed_list(1)` "1.0, 2.0".
FILTERS = {
    "fixed": _fixed,
    "sci": lambda value, digits=2: f"{value:.{digits}e}",
    "percent": lambda value, digits=1: f"{value:.{digits}%}",
    "signed": lambda value, digits=4: f"{value:+.{digits}f}",
    "g": lambda value: f"{value:g}",
    "commas": lambda value: f"{value:,}",
    "fixed_list": lambda values, digits=2, sep=", ": sep.join(_fixed(v, digits) for v in values),
}

_ENVIRONMENT = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                  trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                  autoescape=False)
_ENVIRONMENT.filters.update(FILTERS)


def render(template: str, **context) -> str:
    """bench/report/templates/`template` filled in from `context`; a name it uses that the context
    lacks is an error."""
    return _ENVIRONMENT.get_template(template).render(**context)


def write_page(path: Path, text: str) -> None:
    """Writes a page's text ending in one newline."""
    path.write_text(text.rstrip() + "\n")
    print(f"wrote {path}")


def heading_lines(title: str, intro: str, run: dict, data_folder: str, commands: list[str]) -> list[str]:
    """The page's title (with the run's date), its introduction, the machine and the commands."""
    return [f"# {title} (run of {run['date_utc'][:10]})", "", intro, "",
            f"- Machine: {run.get('cpu_model', '?')}, {run.get('logical_cpus', '?')} logical CPUs, "
            f"{run.get('threads', '?')} mtpspec threads; date (UTC) {run['date_utc']}",
            f"- Data: `{data_folder}/` (the JSON of every run).", "", "Commands:", "", "```"] + commands + ["```", ""]


def section_heading(title: str, intro: str, run: dict) -> list[str]:
    """A section's title (with its run's date), its introduction and the machine, for pages that
    hold several runs (the page's heading_lines hold the commands)."""
    return [f"## {title} (run of {run['date_utc'][:10]})", "", intro, "",
            f"- Machine: {run.get('cpu_model', '?')}, {run.get('logical_cpus', '?')} logical CPUs, "
            f"{run.get('threads', '?')} mtpspec threads; date (UTC) {run['date_utc']}", ""]


def demoted(lines: list[str]) -> list[str]:
    """The lines with every Markdown heading one level lower (a page's sections become subsections);
    a line may hold several, separated by newlines."""
    return [re.sub(r"(?m)^(#+) ", r"#\1 ", line) for line in lines]


def side_by_side_table(run: dict, entries: list[str]) -> tuple[list[str], dict[str, list[float]]]:
    """The table of a `real_scale_bench --decode-side-by-side` run over `entries` (f32 first): per
    context each entry's median step, f32's step over each other entry's in the same repetition, and
    each entry's weight bytes per second over the read bandwidth measured before it (medians). Also
    returns every repetition's ratio to the read bandwidth, pooled over the contexts, per entry."""
    step_bytes = run["step_weight_bytes"]
    others = [e for e in entries if e != "f32"]
    lines = ["| N | " + " | ".join(f"step, {e} (ms)" for e in entries) + " | " +
             " | ".join(f"f32 ÷ {e}" for e in others) + " | " +
             " | ".join(f"÷ read bandwidth, {e}" for e in entries) + " |",
             "|---|" + "---|" * (2 * len(entries) + len(others))]
    pooled = {e: [] for e in entries}
    for point in run["contexts"]:
        st = point["storages"]
        ratios = {e: [step_bytes / w / bw for w, bw in zip(st[e]["whole"], st[e]["read_bandwidth"])] for e in entries}
        for e in entries:
            pooled[e] += ratios[e]
        lines.append(f"| {point['context']} | " +
                     " | ".join(f"{1e3 * median(st[e]['whole']):.1f}" for e in entries) + " | " +
                     " | ".join(f"{median(a / b for a, b in zip(st['f32']['whole'], st[e]['whole'])):.2f}"
                                for e in others) + " | " +
                     " | ".join(f"{median(ratios[e]):.2f}" for e in entries) + " |")
    return lines, pooled


# What the free-running columns of an accuracy comparison measure.
DIVERGENCE_NOTE = ("Free-running greedy outputs part after a first differing token and then go their own ways, so "
                   "their equal share and the MTP acceptance on each side's own text measure divergence, not quality; "
                   "the teacher-forced columns compare the two on the same text.")


def comparison_row(label: str, result: dict, side: str) -> str:
    """One `numerics_bench --variant` run as a table row: windows × steps, mean and p99 KL, the largest
    relative logit error, argmax agreement, held-out loss f32 → `side`, the free-running greedy
    columns and the MTP mean acceptance length f32 → `side` (— without an MTP layer)."""
    t, g, s = result["teacher_forced"], result["greedy"], result["settings"]
    mtp = result.get("mtp") or {}
    acc = f"{mtp['mean_acceptance_length_f32']:.3f} → {mtp[f'mean_acceptance_length_{side}']:.3f}" if mtp else "—"
    return (f"| {label} | {s['windows']} × {s['eval_tokens']} | {t['mean_kl_nats']:.2e} | {t['p99_kl_nats']:.2e} | "
            f"{t['max_relative_logit_error']:.4f} | {t['argmax_agreement']:.4f} | {t['mean_nll_f32']:.4f} → "
            f"{t[f'mean_nll_{side}']:.4f} | {g['mean_first_difference']:.1f} of {g['tokens']}, "
            f"{g['mean_equal_fraction']:.3f} | {acc} |")
