"""Model loading, config, raw logits (against the C++ CLI), timing and the MTP draft chain."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mtpspec
from conftest import GLM_A, THREADS

IDS = [5, 17, 42, 99, 3, 250, 7, 64, 128, 12, 33, 200]


def test_config_matches_config_json(model: mtpspec.Model) -> None:
    raw = json.loads((GLM_A / "config.json").read_text())
    c = model.config
    assert c["model_type"] == "glm_moe_dsa"
    for key in ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "kv_lora_rank",
                "q_lora_rank", "index_topk", "max_position_embeddings", "num_nextn_predict_layers"]:
        assert c[key] == raw[key], key
    assert c["layer_is_dense"] == [t == "dense" for t in raw["mlp_layer_types"]]
    assert c["layer_has_indexer"] == [t == "full" for t in raw["indexer_types"]]
    assert c["rope"]["theta"] == raw["rope_parameters"]["rope_theta"]
    assert c["eos_token_ids"] == [raw["eos_token_id"]]
    assert model.vocab_size == raw["vocab_size"]
    assert model.has_mtp
    assert model.tokenizer is None  # glm_a ships no tokenizer.json
    report = model.load_report
    assert report["mtp_present"] and report["tensors_loaded"] > 0 and report["cache_bytes_per_token"] > 0
    assert "glm_moe_dsa" in repr(model)


@pytest.mark.parametrize("rows, cli_rows", [(None, None), ("last", "last"), ([0, 5, 11], "0,5,11")])
def test_logits_equal_the_cli(model: mtpspec.Model, cli: Path, tmp_path: Path, rows, cli_rows) -> None:
    out = tmp_path / "logits.npy"
    command = [str(cli), "logits", str(GLM_A), "--ids", ",".join(map(str, IDS)), "--out", str(out),
               "--threads", str(THREADS)]
    if cli_rows:
        command += ["--rows", cli_rows]
    subprocess.run(command, check=True, capture_output=True)
    expected = np.load(out)
    got = model.logits(IDS, rows=rows)
    assert got.dtype == np.float32
    assert got.shape == expected.shape == (len(IDS) if rows is None else 1 if rows == "last" else len(rows), 256)
    # Identical builds agree exactly; a debug extension against a release CLI differs in rounding,
    # so allow the project's golden tolerance (1e-4 of the logit scale).
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def test_int8_logits_equal_the_cli_and_bad_storage_is_named(model: mtpspec.Model, cli: Path, tmp_path: Path) -> None:
    out = tmp_path / "logits.npy"
    base = [str(cli), "logits", str(GLM_A), "--ids", ",".join(map(str, IDS)), "--out", str(out),
            "--threads", str(THREADS)]
    subprocess.run(base + ["--kv-cache", "int8"], check=True, capture_output=True)
    expected = np.load(out)
    np.testing.assert_allclose(model.logits(IDS, kv_cache="int8"), expected, rtol=0,
                               atol=1e-4 * np.abs(expected).max())
    bad = subprocess.run(base + ["--kv-cache", "int4"], capture_output=True, text=True)
    assert bad.returncode != 0
    assert '--kv-cache must be f32, int8 or fp8, got "int4"' in bad.stderr


def test_bf16_index_key_logits_equal_the_cli_and_bad_storage_is_named(cli: Path, tmp_path: Path) -> None:
    out = tmp_path / "logits.npy"
    base = [str(cli), "logits", str(GLM_A), "--ids", ",".join(map(str, IDS)), "--out", str(out),
            "--threads", str(THREADS)]
    subprocess.run(base + ["--index-keys", "bf16"], check=True, capture_output=True)
    expected = np.load(out)
    bf16 = mtpspec.Model.load(GLM_A, index_keys="bf16")
    np.testing.assert_array_equal(bf16.logits(IDS), expected)  # one process or the other, the same bits
    bad = subprocess.run(base + ["--index-keys", "int4"], capture_output=True, text=True)
    assert bad.returncode != 0
    assert '--index-keys must be f32, bf16 or fp8, got "int4"' in bad.stderr


def test_logits_arguments(model: mtpspec.Model) -> None:
    full = model.logits(np.array(IDS, dtype=np.int64))
    np.testing.assert_array_equal(model.logits(IDS, positions=list(range(len(IDS)))), full)
    np.testing.assert_array_equal(model.logits(IDS, rows="last")[0], full[-1])
    short = IDS[:8]  # T <= index_topk = 8: every path applies and selects every key
    np.testing.assert_allclose(model.logits(short, path="dense"), model.logits(short, path="mask"), atol=1e-5)
    np.testing.assert_allclose(model.logits(short, path="gather"), model.logits(short), atol=1e-5)
    with pytest.raises(ValueError, match="index_topk"):
        model.logits(IDS, path="dense")
    with pytest.raises(ValueError, match="positions must start at 0"):
        model.logits(IDS, positions=list(range(1, len(IDS) + 1)))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.logits([1, 256])
    with pytest.raises(ValueError, match="path must be"):
        model.logits(IDS, path="sideways")
    with pytest.raises(ValueError, match="ids is empty"):
        model.logits([])


def test_logits_hand_over_the_cpp_buffer(model: mtpspec.Model) -> None:
    logits = model.logits(IDS)
    assert not logits.flags.owndata  # the array views the C++ tensor ...
    assert logits.base is not None and not isinstance(logits.base, np.ndarray)  # ... kept alive by a capsule
    assert logits.flags.c_contiguous
    view = logits[3]
    del logits
    assert np.isfinite(view).all()  # the buffer outlives the array it came from


def test_weight_dtypes(model: mtpspec.Model) -> None:
    f32 = mtpspec.Model.load(GLM_A, dtype="f32")
    np.testing.assert_array_equal(f32.logits(IDS), model.logits(IDS))  # glm_a is stored in f32
    bf16 = mtpspec.Model.load(GLM_A, dtype="bf16")
    # bf16 rounding can flip a MoE routing or indexer choice of this random model, so only ask for
    # logits that differ a little overall.
    reference, rounded = model.logits(IDS), bf16.logits(IDS)
    assert not np.array_equal(rounded, reference)
    assert np.corrcoef(rounded.ravel(), reference.ravel())[0, 1] > 0.95
    fp8 = mtpspec.Model.load(GLM_A, dtype="fp8")  # the matrices but the router quantised at load
    assert fp8.load_report["fp8_tensors_quantised"] > 10
    rounded = fp8.logits(IDS)
    assert not np.array_equal(rounded, reference)
    assert np.corrcoef(rounded.ravel(), reference.ravel())[0, 1] > 0.9
    plain = fp8.generate(IDS, 16, draft="none", stop_at_eos=False)
    speculative = fp8.generate(IDS, 16, draft="mtp", k=3, stop_at_eos=False)
    assert speculative.tokens == plain.tokens  # FP8 rows stay independent of the row count
    with pytest.raises(ValueError, match="dtype"):
        mtpspec.Model.load(GLM_A, dtype="int4")


@pytest.mark.parametrize("storage", ["bf16", "fp8"])
def test_reduced_precision_index_keys(model: mtpspec.Model, storage: str) -> None:
    reduced = mtpspec.Model.load(GLM_A, index_keys=storage)
    assert reduced.index_keys == storage and model.index_keys == "f32"
    k = model.config["index_topk"]
    assert len(IDS) > k
    # Rows that see at most index_topk keys take them all, whatever the scores: identical to f32.
    np.testing.assert_array_equal(reduced.logits(IDS)[:k], model.logits(IDS)[:k])
    assert np.isfinite(reduced.logits(IDS)).all()
    plain = reduced.generate(IDS, 16, draft="none", stop_at_eos=False)
    speculative = reduced.generate(IDS, 16, draft="mtp", k=3, stop_at_eos=False)
    assert speculative.tokens == plain.tokens
    with pytest.raises(ValueError, match="index_keys"):
        mtpspec.Model.load(GLM_A, index_keys="int4")


@pytest.mark.parametrize("activations", ["bf16", "fp8"])
def test_reduced_precision_activations(activations: str, cli: Path, tmp_path: Path) -> None:
    fp8 = mtpspec.Model.load(GLM_A, dtype="fp8")
    reduced = mtpspec.Model.load(GLM_A, dtype="fp8", activations=activations)
    assert reduced.activations == activations and fp8.activations == "f32"
    report = reduced.load_report
    assert report["matrices_reduced_activations"] == report["fp8_tensors_quantised"] > 0
    assert fp8.load_report["matrices_reduced_activations"] == 0
    logits = reduced.logits(IDS)
    assert np.isfinite(logits).all() and not np.array_equal(logits, fp8.logits(IDS))
    plain = reduced.generate(IDS, 16, draft="none", stop_at_eos=False)
    speculative = reduced.generate(IDS, 16, draft="mtp", k=3, stop_at_eos=False)
    assert speculative.tokens == plain.tokens
    # The CLI gives the bindings' bits.
    out = tmp_path / "logits.npy"
    subprocess.run([str(cli), "logits", str(GLM_A), "--ids", ",".join(map(str, IDS)), "--out", str(out),
                    "--threads", str(THREADS), "--weights", "fp8", "--activations", activations],
                   check=True, capture_output=True)
    np.testing.assert_array_equal(np.load(out), logits)
    bad = subprocess.run([str(cli), "logits", str(GLM_A), "--ids", "1,2", "--out", str(out), "--activations", "int4"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and '--activations must be f32, bf16 or fp8, got "int4"' in bad.stderr
    with pytest.raises(ValueError, match='activations must be f32, bf16 or fp8, got "int4"'):
        mtpspec.Model.load(GLM_A, activations="int4")
    # On a checkpoint without FP8 matrices the setting changes nothing, and says so.
    with pytest.warns(UserWarning, match=f"activations {activations} change nothing.*weights fp8"):
        stored = mtpspec.Model.load(GLM_A, activations=activations)
    np.testing.assert_array_equal(stored.logits(IDS), mtpspec.Model.load(GLM_A).logits(IDS))
    warned = subprocess.run([str(cli), "logits", str(GLM_A), "--ids", "1,2", "--out", str(out), "--activations",
                             activations], capture_output=True, text=True, check=True)
    assert "warning: --activations" in warned.stderr and "change nothing" in warned.stderr


def test_missing_model_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model") as info:
        mtpspec.Model.load(missing)
    assert isinstance(info.value, mtpspec.NotFoundError)


def test_cache_capacity(model: mtpspec.Model) -> None:
    with pytest.raises(ValueError, match="max_position_embeddings"):
        mtpspec.Model.load(GLM_A, cache_capacity=10_000)
    with pytest.raises(ValueError, match="cache_capacity"):
        mtpspec.Model.load(GLM_A, cache_capacity=0)
    small = mtpspec.Model.load(GLM_A, cache_capacity=20)
    np.testing.assert_array_equal(small.logits(IDS), model.logits(IDS))
    r = small.generate(IDS, 50, stop_at_eos=False)
    assert r.stop_reason == "capacity" and len(r.tokens) <= 20 - len(IDS) + 1


def test_thread_count_is_fixed_once_running(model: mtpspec.Model) -> None:
    assert mtpspec.thread_count() == THREADS
    mtpspec.Model.load(GLM_A, threads=THREADS)  # the count in use: fine
    with pytest.raises(mtpspec.Error, match="already runs 2 threads") as info:
        mtpspec.Model.load(GLM_A, threads=THREADS + 1)
    assert info.value.code == "FAILED_PRECONDITION"
    with pytest.raises(ValueError, match="threads must be in"):
        mtpspec.set_threads(0)


def test_time_forward(model: mtpspec.Model) -> None:
    seconds = model.time_forward(IDS, rows=4, repeats=3, warmup=1)
    assert seconds.shape == (3,) and seconds.dtype == np.float64 and (seconds > 0).all()
    with pytest.raises(ValueError, match="rows must be >= 1"):
        model.time_forward(IDS, rows=0)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.time_forward(list(range(2, 127)), rows=5)


def test_mtp_draft(model: mtpspec.Model) -> None:
    d = model.mtp_draft(IDS, 4)
    assert len(d.tokens) == 4 and d.probs.shape == (4, 256) and d.probs.dtype == np.float32
    np.testing.assert_allclose(d.probs.sum(axis=1), 1.0, rtol=1e-5)
    assert list(d.probs.argmax(axis=1)) == d.tokens
    assert d.next_token == int(model.logits(IDS, rows="last")[0].argmax())
    assert (d.token_probs == d.probs.max(axis=1)).all()
    # Teacher forcing: another next token changes the chain's input.
    forced = model.mtp_draft(IDS, 4, next_token=(d.next_token + 1) % 256)
    assert forced.next_token == (d.next_token + 1) % 256
    assert not np.array_equal(forced.probs, d.probs)
    raw = model.mtp_draft(IDS, 4, chain="raw")
    np.testing.assert_array_equal(raw.probs[0], d.probs[0])  # the chain only matters from step 2
    with pytest.raises(ValueError, match="k must be in"):
        model.mtp_draft(IDS, 0)
    with pytest.raises(ValueError, match="chain"):
        model.mtp_draft(IDS, 2, chain="sideways")


def test_mtp_draft_is_the_first_speculative_cycle(model: mtpspec.Model) -> None:
    seen = []

    def record(target_probs, drafts, draft_probs):
        seen.append(list(drafts))
        m = 0
        while m < len(drafts) and int(np.argmax(target_probs[m])) == drafts[m]:
            m += 1
        return m, int(np.argmax(target_probs[m]))

    for hidden in ["post", "pre"]:
        seen.clear()
        r = model.generate(IDS, 8, k=3, mtp_hidden=hidden, acceptance_hook=record)
        d = model.mtp_draft(IDS, 3, hidden=hidden)
        assert d.next_token == r.tokens[0]
        assert seen[0] == d.tokens


def test_int8_latent_cache_logits_move_little_on_the_trained_model(root: Path) -> None:
    """kv_cache="int8" stores the MLA latent as int8 with one scale per token: the logits change,
    by little on trained weights (bench/numerics_bench measures it on held-out text)."""
    trained = mtpspec.Model.load(root / "models" / "glm-tiny-mtp", threads=THREADS)
    assert trained.tokenizer is not None
    text = ("The committee met on a wet Tuesday to weigh the new bridge, and after some argument about "
            "the cost of steel it agreed to ask the engineers for a second design. ") * 3
    ids = trained.tokenizer.encode(text)
    assert len(ids) > trained.config["index_topk"]  # the sparse regime is reached
    f32 = trained.logits(ids).astype(np.float64)
    int8 = trained.logits(ids, kv_cache="int8").astype(np.float64)
    assert f32.shape == int8.shape
    assert np.any(f32 != int8)  # it really is quantised

    def log_softmax(z: np.ndarray) -> np.ndarray:
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    lp, lq = log_softmax(f32), log_softmax(int8)
    kl = (np.exp(lp) * (lp - lq)).sum(axis=1)  # KL(p_f32 ‖ p_int8) per row
    # Typical rows move by ~1e-6 nats; a row with only a few keys in its context can move more
    # (0.17 nats at row 6 of this text), since its attention rests on those few quantised latents.
    assert np.quantile(kl, 0.95) < 1e-4
    assert kl.max() < 1.0
    assert (f32.argmax(axis=1) == int8.argmax(axis=1)).mean() >= 0.95
    with pytest.raises(ValueError, match="kv_cache"):
        trained.logits(ids, kv_cache="int4")


def test_fp8_latent_cache_logits_move_little_on_the_trained_model(root: Path) -> None:
    """kv_cache="fp8" keeps the cache as DeepSeek-V3.2 is served (e4m3 latent, bf16 rope key) and, on
    the gather path (the decode and verify form), attends in bf16 products: the logits change by
    little on trained weights (bench/numerics_bench --variant fp8-latent measures it on held-out text)."""
    trained = mtpspec.Model.load(root / "models" / "glm-tiny-mtp", threads=THREADS)
    assert trained.tokenizer is not None
    text = ("The committee met on a wet Tuesday to weigh the new bridge, and after some argument about "
            "the cost of steel it agreed to ask the engineers for a second design. ") * 3
    ids = trained.tokenizer.encode(text)
    assert len(ids) > trained.config["index_topk"]
    f32 = trained.logits(ids, path="gather").astype(np.float64)
    fp8 = trained.logits(ids, path="gather", kv_cache="fp8").astype(np.float64)
    assert np.any(f32 != fp8)  # it really is quantised and rounded

    def log_softmax(z: np.ndarray) -> np.ndarray:
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    lp, lq = log_softmax(f32), log_softmax(fp8)
    kl = (np.exp(lp) * (lp - lq)).sum(axis=1)  # KL(p_f32 ‖ p_fp8) per row
    # e4m3 keeps 3 mantissa bits per latent value and bf16 7 per query and weight: typical rows move
    # by a few 1e-5 nats (tens of times int8's), the worst row of this text by about 0.03.
    assert np.median(kl) < 2e-4
    assert kl.max() < 0.2
    assert (f32.argmax(axis=1) == fp8.argmax(axis=1)).mean() >= 0.95
