"""The OpenAI-compatible server with real clients, on 127.0.0.1: the official openai SDK
(completions and chat, streamed and not, mtpspec's fields through extra_body), /metrics read the way
`vllm bench serve` reads it and checked against the per-request statistics, every request equal to
its offline twin (the same request through Model.generate), and the bad input of each kind answered
with an HTTP error whose JSON body names the field, without losing another request."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List

import pytest

import mtpspec
from conftest import ROOT, THREADS
from server_util import ServerProcess, sse_events, vllm_sums

openai = pytest.importorskip("openai", reason="the server tests need the openai SDK (tests/python/requirements.txt)")

TRAINED = ROOT / "models" / "glm-tiny-mtp"
TEMPLATE = ROOT / "tests" / "python" / "data" / "plain_chat_template.jinja"
PROMPTS = ["It is a truth universally acknowledged", "Once upon a time", "def main(args):", "The cat sat on the"]


@pytest.fixture(scope="module")
def server():
    s = ServerProcess(TRAINED, "--batch", "4", "--max-waiting", "64", "--k", "3", "--chat-template", str(TEMPLATE),
                      "--capacity", "512")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def twin() -> mtpspec.Model:
    return mtpspec.Model.load(TRAINED, threads=THREADS)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=60, max_retries=0)


def offline(model: mtpspec.Model, prompt: Any, max_tokens: int, **options: Any):
    ids = model.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
    options.setdefault("k", 3)
    return model.generate(ids, max_tokens, **options)


def test_completions_through_the_openai_sdk_equal_their_offline_twins(client, twin) -> None:
    for i, prompt in enumerate(PROMPTS):
        temperature = 0.0 if i % 2 == 0 else 0.8
        r = client.completions.create(model="glm-tiny-mtp", prompt=prompt, max_tokens=24, temperature=temperature,
                                      seed=11 + i, extra_body={"ignore_eos": True, "k": 2 + i % 2})
        alone = offline(twin, prompt, 24, temperature=temperature, seed=11 + i, stop_at_eos=False, k=2 + i % 2)
        choice = r.choices[0]
        assert choice.model_extra["token_ids"] == alone.tokens
        assert choice.text == alone.text
        assert choice.finish_reason == "length"
        assert r.usage.completion_tokens == 24 and r.usage.prompt_tokens == len(twin.tokenizer.encode(prompt))
        spec = r.model_extra["metrics"]["speculative_decoding"]
        assert spec["num_draft_tokens"] == alone.stats.num_draft_tokens
        assert spec["num_accepted_draft_tokens"] == alone.stats.num_accepted_tokens
        assert r.model_extra["timings"]["draft_n_accepted"] == alone.stats.num_accepted_tokens
        # Per-position acceptance as the offline run's statistics state it (spec/stats.h).
        assert spec["per_position_acceptance_rate"] == pytest.approx(list(alone.stats.per_position_acceptance))
        assert spec["per_position_conditional_acceptance_rate"] == pytest.approx(
            list(alone.stats.conditional_acceptance))
        assert len(spec["per_position_acceptance_rate"]) == 2 + i % 2
        assert spec["tokens_per_second"] > 0


def test_streamed_completion_and_chat(client, twin) -> None:
    stream = client.completions.create(model="glm-tiny-mtp", prompt=PROMPTS[0], max_tokens=20, temperature=0,
                                       stream=True, stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True, "draft": "none"})
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    alone = offline(twin, PROMPTS[0], 20, draft="none", stop_at_eos=False)
    assert text == alone.text
    assert chunks[-1].usage.completion_tokens == 20
    assert chunks[-1].model_extra["metrics"]["speculative_decoding"]["num_spec_steps"] == 0  # plain decoding
    assert sum(1 for c in chunks if c.choices) >= 2, "one chunk per verify step"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]
    rendered = "system: Be brief.\nuser: Tell me a story.\n(no thinking) assistant:"
    chat = client.chat.completions.create(model="glm-tiny-mtp", messages=messages, max_completion_tokens=16,
                                          temperature=0, extra_body={"chat_template_kwargs": {"enable_thinking": False},
                                                                     "ignore_eos": True})
    alone = offline(twin, rendered, 16, stop_at_eos=False)
    assert chat.choices[0].message.content == alone.text
    streamed = client.chat.completions.create(model="glm-tiny-mtp", messages=messages, max_completion_tokens=16,
                                              temperature=0, stream=True,
                                              extra_body={"chat_template_kwargs": {"enable_thinking": False},
                                                          "ignore_eos": True})
    parts = list(streamed)
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == alone.text


def test_streamed_logprobs_equal_the_plain_ones(server) -> None:
    body = {"prompt": PROMPTS[3], "max_tokens": 12, "temperature": 0.6, "seed": 4, "logprobs": 0, "ignore_eos": True}
    status, _, plain = server.request("/v1/completions", body)
    assert status == 200, plain
    events = sse_events("/v1/completions", server.url, {**body, "stream": True})
    chunks = [e for e in events if e != "[DONE]" and e["choices"]]
    streamed = [lp for c in chunks if c["choices"][0]["logprobs"] for lp in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed == plain["choices"][0]["logprobs"]["token_logprobs"]
    assert "metrics" in chunks[-1] and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == plain["choices"][0]["token_ids"]


def test_stop_strings_and_echo_logprobs(server, twin) -> None:
    alone = offline(twin, PROMPTS[1], 40, stop_at_eos=False)
    stop = alone.text[8:11]
    status, _, body = server.request("/v1/completions", {"prompt": PROMPTS[1], "max_tokens": 40, "temperature": 0,
                                                         "stop": [stop], "ignore_eos": True})
    assert status == 200
    assert body["choices"][0]["text"] == alone.text[:alone.text.find(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"
    # lm-eval's loglikelihood request: the prompt's own logprobs with echo.
    ids = twin.tokenizer.encode(PROMPTS[2])
    status, _, body = server.request("/v1/completions", {"prompt": ids, "max_tokens": 1, "temperature": 0,
                                                         "echo": True, "logprobs": 1})
    assert status == 200, body
    lp = body["choices"][0]["logprobs"]
    logits = twin.logits(ids)
    for i in range(1, len(ids)):
        row = logits[i - 1].astype("float64")
        expected = row[ids[i]] - row.max() - __import__("math").log(sum(__import__("math").exp(x - row.max()) for x in row))
        assert abs(lp["token_logprobs"][i] - expected) < 1e-4
    assert lp["token_logprobs"][0] is None and len(lp["token_logprobs"]) == len(ids) + 1


def test_metrics_equal_the_sum_of_the_requests(server) -> None:
    before = vllm_sums(server.metrics())
    totals = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    per_pos: Dict[str, int] = {}
    generated = 0
    for i, prompt in enumerate(PROMPTS):
        status, _, body = server.request("/v1/completions", {"prompt": prompt, "max_tokens": 30, "temperature": 0.5,
                                                             "seed": i, "k": 1 + i, "spec_decode_metrics": "detailed"})
        assert status == 200, body
        spec = body["metrics"]["speculative_decoding"]
        totals["num_drafts"] += spec["num_spec_steps"]
        totals["num_draft_tokens"] += spec["num_draft_tokens"]
        totals["num_accepted_tokens"] += spec["num_accepted_draft_tokens"]
        for accepted in spec["per_step_accepted"]:
            for p in range(accepted):
                per_pos[f"per_pos_{p}"] = per_pos.get(f"per_pos_{p}", 0) + 1
        assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"]
        generated += body["usage"]["completion_tokens"]
    after = vllm_sums(server.metrics())
    for name, value in totals.items():
        assert after[name] - before[name] == value, name
    for name, value in per_pos.items():
        assert after[name] - before.get(name, 0) == value, name
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == generated
    status, _, body = server.request("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 30, "temperature": 0,
                                                         "tree": [2, 1]})
    assert status == 200, body
    text = server.metrics()
    assert 'mtpspec:spec_decode_accepted_per_depth_total{model_name="glm-tiny-mtp",depth="0"}' in text
    assert 'mtpspec:spec_decode_accepted_per_rank_total{model_name="glm-tiny-mtp",rank="0"}' in text
    assert all(line.split("{")[0].split(" ")[0].endswith("_total") or line.startswith("#")
               for line in text.splitlines() if line.startswith("vllm:spec_decode")), "nothing else under the prefix"


@pytest.mark.parametrize("body, status, param", [
    ({"prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
    ({"prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"prompt": "x", "top_p": 0}, 400, "top_p"),
    ({"prompt": "x", "n": 2}, 400, "n"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "model"),
    ({"prompt": [1, 2, 999999]}, 400, "prompt"),
    ({"prompt": "x " * 2000}, 400, "prompt"),
    ({"prompt": "x", "max_tokens": 5000}, 400, "max_tokens"),
    ({"prompt": "x", "k": 99}, 400, "k"),
    ({"prompt": "x", "tree": "wide"}, 400, "tree"),
    ({"prompt": "x", "frequency_penalty": 0.5}, 400, "frequency_penalty"),
    ({"prompt": "x", "beams": 3}, 400, "beams"),
    ({"prompt": "x", "max_new_tokens": 3}, 400, "max_new_tokens"),
    ({"max_tokens": 3}, 400, "prompt"),
    ({"prompt": "x", "draft": "lookup"}, 400, "draft"),
    ({"prompt": "x", "stream": True, "echo": True}, 400, "echo"),
    ({"prompt": "\ud800"}, 400, "prompt"),
    ({"prompt": "x", "stop": "\ud800"}, 400, "stop"),
])
def test_bad_requests_are_named_errors(server, body, status, param) -> None:
    got, _, answer = server.request("/v1/completions", body)
    assert got == status, answer
    assert answer["error"]["param"] == param, answer
    assert answer["error"]["message"]


def test_chat_faults_are_400s(server) -> None:
    messages = [{"role": "user", "content": "hi"}]
    for body, param in (({"messages": messages, "chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
                        ({"messages": []}, "messages"),
                        ({"messages": [{"role": "user", "content": {"deep": [1]}}]}, None)):
        status, _, answer = server.request("/v1/chat/completions", {**body, "max_tokens": 2})
        assert status in (200, 400), answer
        if status == 400 and param is not None:
            assert answer["error"]["param"] == param, answer


def test_malformed_bodies(server) -> None:
    for raw in (b"{", b"[1, 2]", b"\xff\xfe", b""):
        status, _, answer = server.request("/v1/completions", raw=raw)
        assert status == 400 and "error" in answer, raw
    status, _, answer = server.request("/v1/completions", raw=b'{"prompt": "' + b"a" * (2 << 20) + b'"}')
    assert status == 413 and "limit" in answer["error"]["message"]


def test_tokenizer_endpoints_and_models(server, twin) -> None:
    status, _, body = server.request("/tokenize", {"prompt": PROMPTS[0]})
    assert status == 200 and body["tokens"] == twin.tokenizer.encode(PROMPTS[0])
    status, _, back = server.request("/detokenize", {"tokens": body["tokens"]})
    assert back["prompt"] == PROMPTS[0]
    status, _, info = server.request("/tokenizer_info")
    assert status == 200 and info["vocab_size"] == twin.tokenizer.vocab_size
    status, _, models = server.request("/v1/models")
    assert models["data"][0]["id"] == "glm-tiny-mtp"


def test_load_of_256_requests_at_concurrency_32(server, twin) -> None:
    """Mixed options, many at once: each equals its offline twin, nothing is lost, the server's
    memory stays flat and it is alive at the end."""
    rng = random.Random(7)
    cases: List[Dict[str, Any]] = []
    for i in range(256):
        case: Dict[str, Any] = {"prompt": rng.choice(PROMPTS) + " " * (i % 3), "max_tokens": rng.randint(4, 28),
                                "temperature": rng.choice([0.0, 0.7]), "seed": i, "ignore_eos": True}
        case.update(rng.choice([{"k": rng.randint(0, 4)}, {"draft": "none"}, {"tree": [2, 1]}, {"k": "auto"},
                                {"k": 2, "accept": "rejection"}]))
        cases.append(case)

    def send(case: Dict[str, Any]) -> Dict[str, Any]:
        status, _, body = server.request("/v1/completions", case, timeout=120)
        assert status == 200, body
        return body

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(send, cases[:32]))  # warm: the caches and buffers settle
        rss_warm = server.rss_bytes()
        answers = list(pool.map(send, cases))
    rss_end = server.rss_bytes()
    assert rss_end - rss_warm < 64 << 20, (rss_warm, rss_end)
    for case, body in zip(cases, answers):
        options = {k: v for k, v in case.items() if k not in ("prompt", "max_tokens", "ignore_eos")}
        alone = offline(twin, case["prompt"], case["max_tokens"], stop_at_eos=False, **options)
        assert body["choices"][0]["token_ids"] == alone.tokens, case
    assert server.request("/health")[0] == 200


def cancelled(text: str) -> int:
    line = next((l for l in text.splitlines() if 'outcome="cancelled"' in l), None)
    return 0 if line is None else int(float(line.rsplit(" ", 1)[1]))


def test_a_client_that_leaves_cancels_its_request(server) -> None:
    before = cancelled(server.metrics())
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "stream": True, "ignore_eos": True})
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        s.recv(4096)  # the headers and the first chunks: it runs
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = server.metrics()
        if cancelled(text) == before + 1 and 'mtpspec:requests_running{model_name="glm-tiny-mtp"} 0' in text:
            break
        time.sleep(0.05)
    assert cancelled(text) == before + 1
    assert 'mtpspec:requests_running{model_name="glm-tiny-mtp"} 0' in text


def test_a_slow_reader_does_not_stall_the_others(server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        body = json.dumps({"prompt": "Once", "max_tokens": 300, "stream": True, "ignore_eos": True})
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        # This client reads nothing while another request runs to its end.
        start = time.monotonic()
        status, _, answer = server.request("/v1/completions", {"prompt": "The cat", "max_tokens": 16})
        assert status == 200 and time.monotonic() - start < 30


def test_limits_key_queue_and_drain() -> None:
    s = ServerProcess(TRAINED, "--batch", "1", "--max-waiting", "1", "--api-key", "secret", "--capacity", "2048",
                      "--drain-seconds", "20")
    try:
        auth = {"Authorization": "Bearer secret"}
        assert s.request("/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 401
        assert s.request("/v1/completions", {"prompt": "x", "max_tokens": 2},
                         headers={"Authorization": "Bearer wrong"})[0] == 401
        assert s.request("/v1/completions", {"prompt": "x", "max_tokens": 2}, headers=auth)[0] == 200
        assert s.request("/health")[0] == 200  # health and metrics stay open
        # One seat and one queue place: a long request runs, a second waits, a third is refused.
        long = {"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": True, "stream": True}
        results: Dict[str, Any] = {}

        def hold(name: str) -> None:
            results[name] = s.request("/v1/completions", long, headers=auth, timeout=120)

        threads = [threading.Thread(target=hold, args=(n,)) for n in ("first", "second")]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while 'mtpspec:requests_waiting{model_name="glm-tiny-mtp"} 1' not in s.metrics():
            assert time.monotonic() < deadline, "the second request never queued"
        status, headers, answer = s.request("/v1/completions", {"prompt": "x", "max_tokens": 2}, headers=auth)
        assert status == 503 and headers.get("retry-after") == "1", answer
        assert "the limit is 1" in answer["error"]["message"]
        for t in threads:
            t.join(120)
        assert results["first"][0] == 200 and results["second"][0] == 200
        # SIGTERM while a request streams: it finishes, then the process ends by itself.
        stream_done: Dict[str, Any] = {}

        def stream() -> None:
            stream_done["events"] = sse_events("/v1/completions", s.url, long, timeout=120, headers=auth)

        t = threading.Thread(target=stream)
        t.start()
        deadline = time.monotonic() + 10
        while 'mtpspec:requests_running{model_name="glm-tiny-mtp"} 1' not in s.metrics():
            assert time.monotonic() < deadline, "the streamed request never started"
    finally:
        code = s.stop()
    t.join(60)
    assert code == 0
    events = stream_done.get("events", [])
    assert events and events[-1] == "[DONE]"
    assert [e for e in events if e != "[DONE]" and e["choices"]][-1]["choices"][0]["finish_reason"] == "length"


def test_fuzzed_bodies_get_answers_and_never_crash_the_server(server) -> None:
    """Random field names, types and values, and broken JSON: each body gets a 200 or an error with
    a JSON body, and the server serves a normal request afterwards."""
    rng = random.Random(2026)
    fields = ["prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stream", "echo",
              "logprobs", "n", "k", "draft", "tree", "tree_nodes", "accept", "synthetic_rates", "ignore_eos",
              "stream_options", "model", "mtp_chain", "eos_token_id", "stop_token_ids", "messages", "bogus"]
    values = [None, True, False, 0, 1, -1, 3, 2 ** 40, 0.5, -0.5, float("inf"), "", "x", "auto", [], [1, 2],
              [-5], ["a"], {}, {"include_usage": True}, [[1, 2]], "It was", 10 ** 30]
    for i in range(300):
        body = {rng.choice(fields): rng.choice(values) for _ in range(rng.randint(0, 6))}
        body.setdefault("max_tokens", rng.choice([1, 4, 8]))
        if rng.random() < 0.7:
            body["prompt"] = rng.choice(["Once", [5, 6, 7], ["a", "b"], body.get("prompt")])
        raw = json.dumps(body, allow_nan=True).encode()
        if rng.random() < 0.1:
            raw = raw[:rng.randint(0, len(raw))]
        path = "/v1/chat/completions" if rng.random() < 0.2 else "/v1/completions"
        status, _, answer = server.request(path, raw=raw, timeout=60)
        assert status == 200 or (400 <= status < 500 and "error" in answer), (status, raw, answer)
    assert server.request("/v1/completions", {"prompt": "Once", "max_tokens": 4})[0] == 200
