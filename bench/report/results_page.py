"""What the results pages' generators share: their arguments, the loading of a run's JSON (copied
beside the page), and the page's heading lines (machine, date, data folder, commands)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Callable


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


def heading_lines(title: str, intro: str, run: dict, data_folder: str, commands: list[str]) -> list[str]:
    """The page's title (with the run's date), its introduction, the machine and the commands."""
    return [f"# {title} (run of {run['date_utc'][:10]})", "", intro, "",
            f"- Machine: {run.get('cpu_model', '?')}, {run.get('logical_cpus', '?')} logical CPUs, "
            f"{run.get('threads', '?')} mtpspec threads; date (UTC) {run['date_utc']}",
            f"- Data: `{data_folder}/` (the JSON of every run).", "", "Commands:", "", "```"] + commands + ["```", ""]
