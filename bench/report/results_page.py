"""What the results pages' generators share: their arguments, the loading of a run's JSON (copied
beside the page), the rendering of a page's template (bench/report/templates/), and the numbers of
a side-by-side decode run.

A page is a generator that computes its numbers from the JSON and a template that holds its prose
and table layout; the templates format the numbers with the filters below."""

from __future__ import annotations

import argparse
import json
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

# The templates' environment (tests/python/test_tradeoff_findings.py calls the findings' macros through it).
ENVIRONMENT = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                 trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
ENVIRONMENT.filters.update(FILTERS)


def render(template: str, **context) -> str:
    """bench/report/templates/`template` filled in from `context`; a name it uses that the context
    lacks is an error."""
    return ENVIRONMENT.get_template(template).render(**context)


def write_page(path: Path, text: str) -> None:
    """Writes a page's text ending in one newline."""
    path.write_text(text.rstrip() + "\n")
    print(f"wrote {path}")


def spread(values: list[float]) -> dict[str, float]:
    """The median, lowest and highest of `values`, and their count."""
    return {"median": median(values), "low": min(values), "high": max(values), "count": len(values)}


def side_by_side(run: dict, entries: list[str]) -> dict:
    """The table of a `real_scale_bench --decode-side-by-side` run over `entries` (f32 first), as
    templates/numerics-parts.md.j2 lays it out: per context each entry's median step (s), f32's step
    over each other entry's in the same repetition, and each entry's weight bytes per second over the
    read bandwidth measured before it (medians). Also every repetition's ratio to the read bandwidth,
    pooled over the contexts, per entry ("pooled", and their medians), and the run's bandwidth
    measurements ("bandwidth")."""
    step_bytes = run["step_weight_bytes"]
    others = [e for e in entries if e != "f32"]
    pooled = {e: [] for e in entries}
    rows = []
    for point in run["contexts"]:
        st = point["storages"]
        ratios = {e: [step_bytes / w / bw for w, bw in zip(st[e]["whole"], st[e]["read_bandwidth"])] for e in entries}
        for e in entries:
            pooled[e] += ratios[e]
        rows.append({"context": point["context"], "step": {e: median(st[e]["whole"]) for e in entries},
                     "gain": {e: median(a / b for a, b in zip(st["f32"]["whole"], st[e]["whole"])) for e in others},
                     "ratio": {e: median(ratios[e]) for e in entries}})
    bandwidth = [b for p in run["contexts"] for e in entries for b in p["storages"][e]["read_bandwidth"]]
    return {"entries": entries, "others": others, "rows": rows, "pooled": pooled,
            "pooled_median": {e: median(v) for e, v in pooled.items()}, "bandwidth": spread(bandwidth),
            "reps": len(run["contexts"][0]["storages"][entries[0]]["whole"])}
