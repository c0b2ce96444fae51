"""model.generate([prompt, ...]): a batch of requests with one verify forward per cycle. Every
request's output equals the same request run alone, the batch statistics add up, stream() works on a
batch, and bad batches raise naming what is wrong without losing the other requests."""

from __future__ import annotations

from pathlib import Path

import pytest

import mtpspec
from conftest import ROOT, THREADS

TRAINED = ROOT / "models" / "glm-tiny-mtp"
PROMPTS = ["It is a truth universally acknowledged, that a single man", "In the beginning God created",
           "def main(args):", "Once upon a time there was", "The cat sat on the", "Call me Ishmael."]
# Mixed settings: k 0..4, temperatures, seeds, rejection, different budgets (requests finish mid-batch).
PER_REQUEST = [{"k": 3, "seed": 1}, {"k": 0, "temperature": 0.8, "seed": 2},
               {"k": 2, "temperature": 1.0, "seed": 3, "accept": "rejection"},
               {"k": 4, "max_new_tokens": 12}, {"k": 1, "temperature": 0.7, "seed": 9, "max_new_tokens": 30},
               {"k": 3, "temperature": 0.8, "seed": 4, "logprobs": True}]


@pytest.fixture(scope="module")
def trained() -> mtpspec.Model:
    return mtpspec.Model.load(TRAINED, threads=THREADS)


@pytest.mark.parametrize("batch", [1, 2, 4, 6])
def test_each_request_of_a_batch_equals_itself_run_alone(trained: mtpspec.Model, batch: int) -> None:
    results = trained.generate(PROMPTS, 24, per_request=PER_REQUEST, batch=batch)
    assert isinstance(results, mtpspec.BatchResult) and len(results) == len(PROMPTS)
    for prompt, options, r in zip(PROMPTS, PER_REQUEST, results):
        alone = trained.generate(prompt, **{"max_new_tokens": 24, **options})
        assert r.tokens == alone.tokens and r.text == alone.text and r.stop_reason == alone.stop_reason
        assert r.stats.num_accepted_tokens == alone.stats.num_accepted_tokens
        assert list(r.stats.accepted_per_pos) == list(alone.stats.accepted_per_pos)
        if options.get("logprobs"):
            assert r.logprobs is not None and list(r.logprobs) == list(alone.logprobs)
    s = results.stats
    assert s.slots == batch and s.requests == len(PROMPTS) and s.failed == 0
    assert s.generated_tokens == sum(len(r.tokens) for r in results)
    assert s.verify_rows == sum(r.stats.verify_steps + r.stats.num_draft_tokens for r in results)
    assert s.forwards == s.cycles == s.batched_forwards and sum(s.batch_histogram) == s.cycles
    assert 0 < s.experts_read <= s.expert_choices
    assert len(s.cycle_log) == s.cycles and sum(c["verify_rows"] for c in s.cycle_log) == s.verify_rows
    assert sum(c["experts_read"] for c in s.cycle_log) == s.experts_read
    assert s.mean_batch <= batch and (batch == 1 or s.mean_batch > 1)
    assert sorted({t["slot"] for t in results.timing}) == list(range(batch))
    assert all(t["latency_seconds"] >= t["queued_seconds"] >= 0 for t in results.timing)


def test_ids_prompts_and_a_k_schedule(model: mtpspec.Model) -> None:
    prompts = [[5, 17, 42, 99, 3], [250, 7, 64], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
    results = model.generate(prompts, 20, k_schedule=[(1, 4), (2, 2), (8, 1)], temperature=0.7, seed=3)
    for ids, r in zip(prompts, results):
        assert r.text is None
        assert r.tokens == model.generate(ids, 20, draft="none", temperature=0.7, seed=3).tokens
        assert r.stats.k_decisions[2:].sum() == 0 or len(results) < 3  # a batch of 3 drafts k = 1
    assert results.stats.batched_forwards > 0


def test_stream_on_a_batch(trained: mtpspec.Model) -> None:
    prompts = PROMPTS[:4]
    options = [{"seed": i, "temperature": 0.8} for i in range(4)]
    texts = {i: "" for i in range(4)}
    stream = trained.stream(prompts, 20, per_request=options, batch=2, stop=" the")
    try:
        while True:
            i, piece = next(stream)
            texts[i] += piece
    except StopIteration as done:
        results = done.value
    for i, prompt in enumerate(prompts):
        alone = trained.generate(prompt, 20, stop=" the", **options[i])
        assert texts[i] == alone.text == results[i].text
    ids = {i: [] for i in range(2)}
    for i, token in trained.stream(prompts[:2], 12, text=False):
        ids[i].append(token)
    assert [ids[0], ids[1]] == [trained.generate(p, 12).tokens for p in prompts[:2]]


def test_bad_batches_raise_naming_the_request(trained: mtpspec.Model) -> None:
    with pytest.raises(ValueError, match=r"requests\[1\]: draft: this request sets it differently"):
        trained.generate(PROMPTS[:3], 8, per_request=[{}, {"draft": "lookup"}, {}])
    with pytest.raises(ValueError, match=r"requests\[2\]: k must be in \[0, 15\]"):
        trained.generate(PROMPTS[:3], 8, per_request=[{}, {}, {"k": 99}])
    with pytest.raises(TypeError, match=r"requests\[0\]: generate\(\) got an unexpected keyword argument 'kk'"):
        trained.generate(PROMPTS[:2], 8, per_request=[{"kk": 1}, {}])
    with pytest.raises(ValueError, match="per_request has 1 entries for 2 prompts"):
        trained.generate(PROMPTS[:2], 8, per_request=[{}])
    with pytest.raises(ValueError, match="batch must be >= 1, got 0"):
        trained.generate(PROMPTS[:2], 8, batch=0)
    with pytest.raises(ValueError, match="batch needs a list of prompts"):
        trained.generate(PROMPTS[0], 8, batch=2)
    with pytest.raises(ValueError, match="acceptance_hook runs one request at a time"):
        trained.generate(PROMPTS[:2], 8, acceptance_hook=lambda p, d, q: (0, 1))
    with pytest.raises(ValueError, match="adaptive_controller serves one request at a time"):
        trained.generate(PROMPTS[:2], 8, k=3, adaptive_k=True, adaptive_controller=mtpspec.AdaptiveController(3))
    with pytest.raises(ValueError, match="conflicts with k_schedule"):
        trained.generate(PROMPTS[:2], 8, k="auto", k_schedule=[(4, 2)])
    with pytest.raises(ValueError, match=r"k_schedule\[1\]: max_batch = 2"):
        trained.generate(PROMPTS[:2], 8, k_schedule=[(4, 2), (2, 1)])
    with pytest.raises(mtpspec.Error, match="GiB of cache .* per slot.* more than the"):
        trained.generate(PROMPTS[:2], 8, batch=10**11)


def test_a_request_that_fails_while_running_loses_none_of_the_others(tmp_path: Path) -> None:
    small = mtpspec.Model.load(TRAINED, threads=THREADS, cache_capacity=64)
    prompts = [PROMPTS[0], "word " * 200, PROMPTS[1]]
    with pytest.raises(mtpspec.BatchError, match=r"1 of 3 requests failed \(prompt 1: request 1: the prompt") as e:
        small.generate(prompts, 8, batch=2)
    results = e.value.results
    assert results[1] is None and set(e.value.errors) == {1}
    for i in (0, 2):
        assert results[i].tokens == small.generate(prompts[i], 8).tokens
    assert results.stats.failed == 1
