"""A server process for the tests: `python -m mtpspec.serving` on 127.0.0.1 at a free port, started
and stopped by the test, with bounded waits everywhere."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, model_dir: Path, *flags: str, threads: int = 2) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mtpspec.serving", str(model_dir), "--port", str(self.port), "--threads",
             str(threads), *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.process.stdout.read()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the server did not start within 60 s")

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def request(self, path: str, body: Any = None, headers: Optional[Dict[str, str]] = None,
                raw: Optional[bytes] = None, timeout: float = 60) -> Tuple[int, Dict[str, str], Any]:
        """(status, headers, JSON body or text) of a GET (no body) or POST."""
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json",
                                                                            **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, hdrs, text = r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
        except urllib.error.HTTPError as e:
            status, hdrs, text = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()
        try:
            return status, hdrs, json.loads(text)
        except ValueError:
            return status, hdrs, text

    def metrics(self) -> str:
        return self.request("/metrics")[2]


def vllm_sums(text: str) -> Dict[str, float]:
    """The spec-decode counters as `vllm bench serve` reads /metrics: every line that starts with
    vllm:spec_decode and contains a counter's name adds to it (per position: by its label)."""
    names = ["num_drafts", "num_draft_tokens", "num_accepted_tokens"]
    sums: Dict[str, float] = {n: 0.0 for n in names}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode"):
            continue
        value = float(line.rsplit(" ", 1)[1])
        if "num_accepted_tokens_per_pos" in line:
            position = line.split('position="', 1)[1].split('"', 1)[0]
            sums[f"per_pos_{position}"] = sums.get(f"per_pos_{position}", 0.0) + value
            continue
        for name in names:
            if f"spec_decode_{name}_total" in line:
                sums[name] += value
    for line in text.splitlines():
        for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
            if line.startswith(name):
                sums[name] = float(line.rsplit(" ", 1)[1])
    return sums


def sse_events(path: str, url: str, body: Dict[str, Any], timeout: float = 60,
               headers: Optional[Dict[str, str]] = None) -> List[Any]:
    """The data: payloads of a streamed request, [DONE] as the string "[DONE]"."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    out: List[Any] = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
