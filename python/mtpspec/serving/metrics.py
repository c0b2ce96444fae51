"""The server's Prometheus text: vLLM's speculative-decoding counters with their exact names and
meanings (vllm/v1/spec_decode/metrics.py), which `vllm bench serve` and aiperf read, and mtpspec's
own counters under its own prefix. Nothing else starts with `vllm:spec_decode`, since the tools sum
every such line whose name contains a counter's name."""

from __future__ import annotations

import threading
from typing import Any, Dict, List


class Metrics:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = 0
        self.prompt_tokens = self.generation_tokens = 0
        self.accepted_per_pos: List[int] = []  # unconditional: steps that accepted position i
        self.reached_per_pos: List[int] = []   # steps that reached position i (all before accepted)
        self.accepted_per_rank: List[int] = []
        self.accepted_per_depth: List[int] = []  # tree nodes accepted at each depth (0: the root's children)
        self.seconds: Dict[str, float] = {"prefill": 0.0, "draft": 0.0, "verify": 0.0, "sample": 0.0, "other": 0.0}
        self.requests: Dict[str, int] = {}

    @staticmethod
    def _add(into: List[int], values: List[int]) -> None:
        into.extend([0] * (len(values) - len(into)))
        for i, v in enumerate(values):
            into[i] += v

    def record(self, stats: Any, outcome: str) -> None:
        """One request's statistics (SpecStats), once it has ended."""
        with self._lock:
            self.drafts += stats.num_drafts
            self.draft_tokens += stats.num_draft_tokens
            self.accepted += stats.num_accepted_tokens
            self.prompt_tokens += stats.prompt_tokens
            self.generation_tokens += stats.generated_tokens
            self._add(self.accepted_per_pos, list(stats.accepted_per_pos))
            self._add(self.reached_per_pos, list(stats.reached_per_pos))
            self._add(self.accepted_per_rank, list(stats.accepted_per_rank))
            self._add(self.accepted_per_depth, [sum(ranks) for ranks in stats.accepted_per_depth_rank])
            for part in self.seconds:
                self.seconds[part] += getattr(stats, f"{part}_seconds")
            self.requests[outcome] = self.requests.get(outcome, 0) + 1

    def text(self, running: int, waiting: int) -> str:
        label = f'model_name="{self.model_name}"'
        lines: List[str] = []

        def counter(name: str, help_text: str, samples: List[Any]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} counter")
            for labels, value in samples:
                lines.append(f"{name}_total{{{label}{labels}}} {value}")

        def gauge(name: str, help_text: str, value: Any) -> None:
            lines.extend([f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{{{label}}} {value}"])

        with self._lock:
            counter("vllm:spec_decode_num_drafts", "Verify steps with at least one draft token.", [("", self.drafts)])
            counter("vllm:spec_decode_num_draft_tokens", "Draft tokens.", [("", self.draft_tokens)])
            counter("vllm:spec_decode_num_accepted_tokens", "Accepted draft tokens.", [("", self.accepted)])
            counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted draft tokens by position.",
                    [(f',position="{i}"', v) for i, v in enumerate(self.accepted_per_pos)])
            counter("vllm:prompt_tokens", "Prompt tokens processed.", [("", self.prompt_tokens)])
            counter("vllm:generation_tokens", "Tokens generated.", [("", self.generation_tokens)])
            counter("mtpspec:spec_decode_reached_per_pos",
                    "Verify steps that reached draft position i (every earlier position accepted); "
                    "accepted_per_pos / reached_per_pos is the conditional acceptance.",
                    [(f',position="{i}"', v) for i, v in enumerate(self.reached_per_pos)])
            counter("mtpspec:spec_decode_accepted_per_rank", "Accepted tree nodes by rank among their siblings.",
                    [(f',rank="{i}"', v) for i, v in enumerate(self.accepted_per_rank)])
            counter("mtpspec:spec_decode_accepted_per_depth", "Accepted tree nodes by depth (0: the root's children).",
                    [(f',depth="{i}"', v) for i, v in enumerate(self.accepted_per_depth)])
            counter("mtpspec:seconds", "Engine time of the ended requests by part.",
                    [(f',part="{p}"', round(s, 6)) for p, s in self.seconds.items()])
            counter("mtpspec:requests", "Ended requests by outcome.",
                    [(f',outcome="{k}"', v) for k, v in sorted(self.requests.items())])
        gauge("mtpspec:requests_running", "Requests holding a seat.", running)
        gauge("mtpspec:requests_waiting", "Requests waiting for a seat.", waiting)
        return "\n".join(lines) + "\n"
