"""generate(): lossless equality with plain decoding, statistics, the Python acceptance hook and
argument errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mtpspec

PROMPT = [5, 17, 42, 99, 3, 250, 7, 64, 128, 12, 33, 200, 9, 77]


@pytest.mark.parametrize("draft", ["mtp", "lookup", "hybrid"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.8, seed=7),
                                      dict(temperature=0.8, top_p=0.9, seed=3)])
def test_speculative_equals_plain_under_sampler_equality(model: mtpspec.Model, draft: str, k: int,
                                                         sampling: dict) -> None:
    plain = model.generate(PROMPT, 48, draft="none", stop_at_eos=False, **sampling)
    spec = model.generate(PROMPT, 48, draft=draft, k=k, stop_at_eos=False, **sampling)
    assert spec.tokens == plain.tokens
    assert len(spec.tokens) == 48 and spec.stop_reason == "max_new_tokens"
    assert spec.text is None  # no tokenizer
    assert plain.stats.num_drafts == 0 and plain.stats.drafter == "none"
    if draft == "mtp":
        assert spec.stats.num_drafts > 0


@pytest.mark.parametrize("kv_cache", ["int8", "fp8"])
@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.8, top_p=0.9, seed=5)])
def test_quantised_caches_keep_speculative_equal_to_plain(model: mtpspec.Model, sampling: dict, kv_cache: str) -> None:
    plain = model.generate(PROMPT, 40, draft="none", stop_at_eos=False, kv_cache=kv_cache, **sampling)
    spec = model.generate(PROMPT, 40, draft="mtp", k=3, stop_at_eos=False, kv_cache=kv_cache, **sampling)
    assert spec.tokens == plain.tokens
    assert spec.stats.num_drafts > 0


@pytest.mark.parametrize("options", [dict(k=3), dict(k=5, temperature=0.8, seed=1), dict(k=4, adaptive_k=True),
                                     dict(k=2, accept="rejection", temperature=1.0, sample_drafts=True, seed=2)])
def test_stats_add_up(model: mtpspec.Model, options: dict) -> None:
    # A fresh adaptive-k controller probes only in requests of >= ~200 tokens at its default 1% budget
    # (spec/adaptive_k.h), more than this model's 128 positions hold: 5% lets it probe in 110.
    n = 110 if options.get("adaptive_k") else 60
    if options.get("adaptive_k"):
        options = dict(options, adaptive_controller=mtpspec.AdaptiveController(k_max=options["k"], exploration_budget=0.05))
    r = model.generate(PROMPT, n, stop_at_eos=False, **options)
    s = r.stats
    assert s.generated_tokens == len(r.tokens) == n
    assert s.prompt_tokens == len(PROMPT)
    assert 0 <= s.num_accepted_tokens <= s.num_draft_tokens
    assert s.num_drafts <= s.verify_steps
    assert s.accepted_histogram.sum() == s.num_drafts
    assert (np.arange(len(s.accepted_histogram)) * s.accepted_histogram).sum() == s.num_accepted_tokens
    assert s.accepted_per_pos.sum() == s.num_accepted_tokens
    assert s.drafted_per_pos.sum() == s.num_draft_tokens
    assert (s.accepted_per_pos <= s.reached_per_pos).all() and (s.reached_per_pos <= s.drafted_per_pos).all()
    assert s.k_decisions.sum() == s.verify_steps
    assert len(s.verify_seconds_by_k) == len(s.cycle_seconds_by_k) == len(s.k_decisions)
    assert s.verify_seconds_by_k.sum() == pytest.approx(s.verify_seconds, rel=1e-9)
    assert (s.cycle_seconds_by_k >= s.verify_seconds_by_k).all()
    assert ((s.k_decisions > 0) == (s.cycle_seconds_by_k > 0)).all()
    assert len(s.probe_decisions) <= len(s.k_decisions) and (s.probe_decisions <= s.k_decisions[:len(s.probe_decisions)]).all()
    assert 0 <= s.extend_seconds <= s.other_seconds and 0 <= s.draft_prefill_seconds <= s.prefill_seconds
    assert s.prompts_deferred == 0  # a request that probes keeps the drafter's prompt
    assert s.adaptive_k == bool(options.get("adaptive_k")) and s.to_dict()["adaptive_k"] == s.adaptive_k
    assert ("adaptive k: cycles by k" in str(s)) == s.adaptive_k
    assert s.mean_acceptance_length == pytest.approx(1 + s.num_accepted_tokens / s.num_drafts)
    np.testing.assert_allclose(s.per_position_acceptance, s.accepted_per_pos / s.num_drafts)
    reached = np.maximum(s.reached_per_pos, 1)
    conditional = np.where(s.reached_per_pos > 0, s.accepted_per_pos / reached, 0)
    np.testing.assert_allclose(s.conditional_acceptance, conditional)
    # Each verify step emits its accepted drafts plus one token (the first token comes from the prefill).
    assert s.num_accepted_tokens + s.verify_steps + 1 >= s.generated_tokens
    assert s.total_seconds >= s.prefill_seconds >= 0 and s.tokens_per_second > 0
    d = s.to_dict()
    assert all(isinstance(v, (int, float, str, bool, list)) for v in d.values())
    assert d["accepted_histogram"] == s.accepted_histogram.tolist() and "summary" not in d
    assert "acceptance" in str(s).lower()


def test_synthetic_acceptance(model: mtpspec.Model) -> None:
    r = model.generate(PROMPT, 40, k=3, accept="synthetic", synthetic_rates=[1.0, 1.0, 1.0], stop_at_eos=False)
    assert r.stats.synthetic and r.stats.lossy
    assert r.stats.num_accepted_tokens == r.stats.num_draft_tokens


def test_on_tokens_can_cancel(model: mtpspec.Model) -> None:
    batches = []

    def on_tokens(tokens):
        batches.append(tokens)
        return len(batches) < 3

    r = model.generate(PROMPT, 60, stop_at_eos=False, on_tokens=on_tokens)
    assert r.stop_reason == "cancelled" and len(batches) == 3
    assert r.tokens == [t for b in batches for t in b]


def greedy_sampler_equality(target_probs: np.ndarray, drafts: list, draft_probs) -> tuple:
    """Sampler-equality for greedy decoding, in Python: accept while the draft is the target's argmax."""
    assert target_probs.shape == (len(drafts) + 1, 256) and draft_probs is None
    accepted = 0
    while accepted < len(drafts) and int(np.argmax(target_probs[accepted])) == drafts[accepted]:
        accepted += 1
    return accepted, int(np.argmax(target_probs[accepted]))


@pytest.mark.parametrize("k", [1, 3, 5])
def test_python_acceptance_hook_matches_the_builtin_rule(model: mtpspec.Model, k: int) -> None:
    builtin = model.generate(PROMPT, 50, k=k, stop_at_eos=False)
    hooked = model.generate(PROMPT, 50, k=k, stop_at_eos=False, acceptance_hook=greedy_sampler_equality)
    assert hooked.tokens == builtin.tokens
    assert hooked.stats.accept_rule == "custom"
    for name in ["num_drafts", "num_draft_tokens", "num_accepted_tokens"]:
        assert getattr(hooked.stats, name) == getattr(builtin.stats, name), name
    np.testing.assert_array_equal(hooked.stats.accepted_histogram, builtin.stats.accepted_histogram)


def test_acceptance_hook_decides(model: mtpspec.Model) -> None:
    """A (lossy) hook that takes every draft: all of them are counted and emitted."""
    drafts_seen = []

    def take_all(target_probs, drafts, draft_probs):
        drafts_seen.extend(drafts)
        return len(drafts), int(np.argmax(target_probs[-1]))

    r = model.generate(PROMPT, 40, k=3, stop_at_eos=False, acceptance_hook=take_all)
    assert r.stats.num_accepted_tokens == r.stats.num_draft_tokens == len(drafts_seen) > 0
    assert r.stats.lossy and r.stats.mean_acceptance_length > 3
    assert len(r.tokens) == 40


def test_acceptance_hook_gets_draft_probs_with_sampled_drafts(model: mtpspec.Model) -> None:
    shapes = []

    def hook(target_probs, drafts, draft_probs):
        shapes.append((target_probs.shape, None if draft_probs is None else draft_probs.shape))
        np.testing.assert_allclose(target_probs.sum(axis=1), 1.0)
        return 0, int(np.argmax(target_probs[0]))

    r = model.generate(PROMPT, 10, k=2, temperature=1.0, sample_drafts=True, acceptance_hook=hook, stop_at_eos=False)
    assert shapes and all(q is not None and t == (q[0] + 1, 256) and q[1] == 256 for t, q in shapes)
    assert shapes[0] == ((3, 256), (2, 256))  # fewer drafts only near the token budget
    assert r.stats.num_accepted_tokens == 0


def test_acceptance_hook_errors(model: mtpspec.Model) -> None:
    class Boom(Exception):
        pass

    def raises(*_):
        raise Boom("from the hook")

    with pytest.raises(Boom, match="from the hook"):
        model.generate(PROMPT, 10, acceptance_hook=raises)
    with pytest.raises(TypeError, match="pair"):
        model.generate(PROMPT, 10, acceptance_hook=lambda *_: 3)
    with pytest.raises(ValueError, match="accepted = 9"):
        model.generate(PROMPT, 10, k=2, acceptance_hook=lambda *_: (9, 0))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate(PROMPT, 10, k=2, acceptance_hook=lambda *_: (0, 256))
    with pytest.raises(ValueError, match="callable"):
        model.generate(PROMPT, 10, acceptance_hook=42)
    with pytest.raises(TypeError, match="acceptance_hook's accepted"):
        model.generate(PROMPT, 10, k=2, acceptance_hook=lambda *_: ("one", 0))
    with pytest.raises(TypeError, match="acceptance_hook's token"):
        model.generate(PROMPT, 10, k=2, acceptance_hook=lambda *_: (0, 1.5))
    # The model is unharmed.
    assert model.generate(PROMPT, 10).tokens == model.generate(PROMPT, 10, draft="none").tokens


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(k=-1), "k must be in"),
        (dict(k=17), "k must be in"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(min_p=2.0), "min_p"),
        (dict(top_k=-3), "top_k"),
        (dict(draft="medusa"), "draft must be"),
        (dict(accept="optimistic"), "optimistic"),
        (dict(mtp_hidden="middle"), "middle"),
        (dict(mtp_chain="loop"), "loop"),
        (dict(mtp_index_share="sometimes"), "mtp_index_share"),
        (dict(synthetic_rates=[1.5]), "synthetic"),
        (dict(max_new_tokens=-2), "max_new_tokens"),
        (dict(kv_cache="int4"), "kv_cache"),
        (dict(device_weights="int4"), "device_weights"),
    ],
)
def test_bad_arguments_raise_value_error(model: mtpspec.Model, options: dict, message: str) -> None:
    options = {"max_new_tokens": 8, **options}
    with pytest.raises(ValueError, match=message):
        model.generate(PROMPT, **options)


def test_bad_prompts(model: mtpspec.Model) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate([1, 2, 300], 4)
    with pytest.raises(ValueError, match="empty"):
        model.generate([], 4)
    with pytest.raises(ValueError, match="no tokenizer"):
        model.generate("hello", 4)
    with pytest.raises(ValueError, match="does not fit"):
        model.generate(list(range(2, 130)), 4)


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.8, top_p=0.9, seed=4)])
def test_carried_adaptive_controller_stays_lossless(model: mtpspec.Model, sampling: dict) -> None:
    controller = mtpspec.AdaptiveController(k_max=3, exploration_budget=0.05)
    assert controller.k_max == 3 and controller.requests == 1 and controller.probes == 0
    assert controller.exploration_budget == 0.05
    for n in (110, 120, 130):
        plain = model.generate(PROMPT, n, draft="none", stop_at_eos=False, **sampling)
        spec = model.generate(PROMPT, n, k=3, adaptive_k=True, adaptive_controller=controller, stop_at_eos=False,
                              **sampling)
        assert spec.tokens == plain.tokens
        assert spec.stats.k_decisions.sum() == spec.stats.verify_steps
        assert spec.stats.prompts_deferred in (0, 1)  # deferred or not, the output is plain's
        assert spec.stats.to_dict()["prompts_deferred"] == spec.stats.prompts_deferred
    assert controller.requests == 3
    assert controller.probes >= 1  # the first request's probe at least (a 5% budget allows one at >= ~40 tokens)
    assert len(controller.conditional_acceptance) == 3
    assert all(0.0 <= a <= 1.0 for a in controller.conditional_acceptance)
    assert 0 <= controller.best_k <= 3
    assert controller.expected_tokens_per_second(0) > 0
    assert controller.expected_tokens_per_second(controller.best_k) >= controller.expected_tokens_per_second(0)


def test_adaptive_controller_errors(model: mtpspec.Model) -> None:
    for bad in (0, -1, mtpspec.MAX_DRAFT_TOKENS + 1):
        with pytest.raises(ValueError, match="k_max"):
            mtpspec.AdaptiveController(k_max=bad)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="exploration_budget"):
            mtpspec.AdaptiveController(k_max=2, exploration_budget=bad)
    assert mtpspec.AdaptiveController(k_max=2).exploration_budget == 0.01
    controller = mtpspec.AdaptiveController(k_max=2)
    with pytest.raises(ValueError, match="k"):
        controller.expected_tokens_per_second(3)
    with pytest.raises(ValueError, match="adaptive_controller was made for k_max = 2"):
        model.generate(PROMPT, 10, k=3, adaptive_k=True, adaptive_controller=controller)
    with pytest.raises(ValueError, match="adaptive_k is false"):
        model.generate(PROMPT, 10, k=2, adaptive_controller=controller)
    # One request at a time: a generate() started while another holds the controller is refused.
    refused: list = []

    def nested(tokens: list) -> bool:
        if not refused:
            try:
                model.generate(PROMPT, 5, k=2, adaptive_k=True, adaptive_controller=controller)
            except mtpspec.Error as e:
                refused.append(str(e))
        return True

    r = model.generate(PROMPT, 20, k=2, adaptive_k=True, adaptive_controller=controller, on_tokens=nested,
                       stop_at_eos=False)
    assert len(r.tokens) == 20
    assert refused and "in use by another generate()" in refused[0]
    assert controller.requests == 1  # the refused request never began
    model.generate(PROMPT, 10, k=2, adaptive_k=True, adaptive_controller=controller)  # released again
    assert controller.requests == 2


def test_k_auto_and_keyword_only_options(model: mtpspec.Model) -> None:
    plain = model.generate(PROMPT, 24, draft="none", stop_at_eos=False)
    auto = model.generate(PROMPT, 24, k="auto", stop_at_eos=False)
    assert auto.tokens == plain.tokens
    assert auto.stats.adaptive_k
    with pytest.raises(TypeError):
        model.generate(PROMPT, 24, "mtp")  # type: ignore[misc]


@pytest.mark.parametrize(
    "options, error, message",
    [
        (dict(k=2.7), TypeError, "k must be an int"),
        (dict(k="many"), ValueError, "k must be an integer or auto"),
        (dict(seed=1.5), TypeError, "seed must be an int"),
        (dict(seed=-1), ValueError, "seed = -1 is outside"),
        (dict(seed=2**64), ValueError, "seed = 18446744073709551616 is outside"),
        (dict(top_k=2**70), ValueError, "top_k = "),
        (dict(max_new_tokens=True), TypeError, "max_new_tokens must be an int"),
        (dict(sample_drafts="yes"), TypeError, "sample_drafts must be True or False"),
        (dict(relaxed_delta=float("nan")), ValueError, "relaxed_delta must be a finite number"),
        (dict(accept="synthetic"), ValueError, "synthetic_rates is needed"),
        (dict(accept="synthetic", synthetic_rates=[0.5]), ValueError, "synthetic_rates has 1 rates for k = 3"),
        (dict(device="tpu"), ValueError, "device"),
        (dict(mtp_hidden="middle"), ValueError, "mtp_hidden must be post or pre"),
    ],
)
def test_options_are_checked_by_type_and_range(model: mtpspec.Model, options: dict, error: type,
                                               message: str) -> None:
    with pytest.raises(error, match=message):
        model.generate(PROMPT, **{"max_new_tokens": 8, **options})


def test_unknown_keyword_and_bad_prompt_ids(model: mtpspec.Model) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        mtpspec._ext.generate(model._m, [1, 2, 3], temprature=0.5)
    with pytest.raises(ValueError, match=r"prompt\[1\] = 4294967296 is outside"):
        model.generate([1, 2**32, 3], 4)
    with pytest.raises(TypeError, match=r"prompt\[0\] must be an int"):
        model.generate([1.5, 2], 4)


def test_pointless_combinations_warn(model: mtpspec.Model) -> None:
    with pytest.warns(UserWarning, match="sample_drafts with accept sampler-equality"):
        model.generate(PROMPT, 4, sample_drafts=True, temperature=0.7)
    with pytest.warns(UserWarning, match="device_weights fp8 is unused unless device is cuda"):
        model.generate(PROMPT, 4, device_weights="fp8")


def test_device_cuda_without_the_backend_says_so(model: mtpspec.Model) -> None:
    with pytest.raises(mtpspec.Error, match="device cuda"):
        model.generate(PROMPT, 4, device="cuda")


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.9, top_k=20, seed=4)])
def test_logprobs_are_the_raw_log_softmax_of_the_targets_logits(model: mtpspec.Model, sampling: dict) -> None:
    plain = model.generate(PROMPT, 24, draft="none", stop_at_eos=False, logprobs=True, **sampling)
    spec = model.generate(PROMPT, 24, draft="mtp", k=3, stop_at_eos=False, logprobs=True, **sampling)
    assert spec.tokens == plain.tokens
    assert plain.logprobs is not None and plain.logprobs.dtype == np.float32 and plain.logprobs.shape == (24,)
    # the oracle: one forward over prompt + tokens, log softmax in float64 at temperature 1
    logits = model.logits(PROMPT + plain.tokens[:-1]).astype(np.float64)[len(PROMPT) - 1:]
    peak = logits.max(axis=1, keepdims=True)
    log_softmax = logits - peak - np.log(np.exp(logits - peak).sum(axis=1, keepdims=True))
    expected = log_softmax[np.arange(24), plain.tokens]
    np.testing.assert_allclose(plain.logprobs, expected, atol=2e-5)
    np.testing.assert_allclose(spec.logprobs, expected, atol=2e-5)
    assert (plain.logprobs <= 0).all()
    assert model.generate(PROMPT, 4, stop_at_eos=False).logprobs is None


def test_eos_override_and_stop_ids_without_a_tokenizer(model: mtpspec.Model) -> None:
    assert model.eos_token_ids == model.config["eos_token_ids"]
    full = model.generate(PROMPT, 30, stop_at_eos=False)
    ending = full.tokens[10]
    m = full.tokens.index(ending)
    r = model.generate(PROMPT, 30, eos_token_id=ending)
    assert r.tokens == full.tokens[:m + 1] and r.stop_reason == "eos" and r.text is None
    r = model.generate(PROMPT, 30, stop_token_ids=np.array([ending]), stop_at_eos=False)
    assert r.tokens == full.tokens[:m + 1] and r.stop_reason == "stop_token"
    with pytest.raises(ValueError, match=r"stop_token_ids\[1\] = 256 is outside the vocabulary"):
        model.generate(PROMPT, 5, stop_token_ids=[1, 256])
    with pytest.raises(ValueError, match=r"eos_token_id\[0\] = -3"):
        model.generate(PROMPT, 5, eos_token_id=-3)
    with pytest.raises(TypeError, match="stop_token_ids must be an int or a sequence of ints"):
        model.generate(PROMPT, 5, stop_token_ids="7")
    with pytest.raises(TypeError, match=r"stop_token_ids\[0\]"):
        model.generate(PROMPT, 5, stop_token_ids=[1.5])
    with pytest.raises(ValueError, match="stop strings need one"):
        model.generate(PROMPT, 5, stop="x")


@pytest.mark.parametrize("k", [0, 5, 15])
def test_per_position_arrays_have_the_documented_lengths(model: mtpspec.Model, k: int) -> None:
    # Three tokens: no step can draft 15, or even 5, yet the arrays are [k_max] and [k_max + 1].
    s = model.generate(PROMPT, 3, k=k, stop_at_eos=False).stats
    for name in ["per_position_acceptance", "conditional_acceptance", "drafted_per_pos", "reached_per_pos",
                 "accepted_per_pos"]:
        assert len(getattr(s, name)) == k, name
    for name in ["accepted_histogram", "k_decisions", "probe_decisions", "verify_seconds_by_k",
                 "cycle_seconds_by_k"]:
        assert len(getattr(s, name)) == k + 1, name


@pytest.mark.parametrize("tree", [dict(tree=[3, 2, 1]), dict(tree=[2, 2, 2]), dict(tree_nodes=8)])
@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.9, top_p=0.95, seed=6)])
def test_tree_drafting_equals_plain(model: mtpspec.Model, tree: dict, sampling: dict) -> None:
    plain = model.generate(PROMPT, 40, draft="none", stop_at_eos=False, **sampling)
    spec = model.generate(PROMPT, 40, stop_at_eos=False, **tree, **sampling)
    assert spec.tokens == plain.tokens
    stats = spec.stats
    assert stats.tree == ("3,2,1" if tree.get("tree") == [3, 2, 1] else "2,2,2" if "tree" in tree else "nodes=8")
    assert stats.num_drafts > 0
    assert stats.accepted_per_rank.sum() == stats.num_accepted_tokens
    assert stats.accepted_per_depth_rank.sum() == stats.num_accepted_tokens
    np.testing.assert_array_equal(stats.accepted_per_depth_rank.sum(axis=0)[:len(stats.accepted_per_rank)],
                                  stats.accepted_per_rank)
    np.testing.assert_array_equal(stats.accepted_per_depth_rank.sum(axis=1),
                                  stats.accepted_per_pos[:stats.accepted_per_depth_rank.shape[0]])
    assert stats.accepted_histogram.sum() == stats.num_drafts
    assert stats.to_dict()["tree"] == stats.tree


def test_the_chain_tree_is_the_chain(model: mtpspec.Model) -> None:
    for k in (1, 2, 3):
        chain = model.generate(PROMPT, 40, k=k, stop_at_eos=False, temperature=0.7, seed=2)
        tree = model.generate(PROMPT, 40, tree=[1] * k, stop_at_eos=False, temperature=0.7, seed=2)
        assert tree.tokens == chain.tokens
        assert tree.stats.num_accepted_tokens == chain.stats.num_accepted_tokens
        assert tree.stats.num_draft_tokens == chain.stats.num_draft_tokens
        assert list(tree.stats.accepted_per_pos) == list(chain.stats.accepted_per_pos)


def test_the_sampled_chain_tree_is_the_sampled_chain(model: mtpspec.Model) -> None:
    options = dict(stop_at_eos=False, temperature=0.8, seed=4, sample_drafts=True, accept="rejection")
    for k in (1, 3):
        chain = model.generate(PROMPT, 40, k=k, **options)
        tree = model.generate(PROMPT, 40, tree=[1] * k, **options)
        assert tree.tokens == chain.tokens
        assert list(tree.stats.accepted_per_pos) == list(chain.stats.accepted_per_pos)


def test_a_sampled_tree_under_rejection_drafts_and_accepts(model: mtpspec.Model) -> None:
    result = model.generate(PROMPT, 40, tree=[3, 2], stop_at_eos=False, temperature=0.8, seed=4,
                            sample_drafts=True, accept="rejection")
    stats = result.stats
    assert len(result.tokens) == 40
    # the 3,2 tree: the root's 3 sampled children at least, all 9 nodes at most
    assert 3 * stats.num_drafts <= stats.num_draft_tokens <= 9 * stats.num_drafts
    assert 0 < stats.num_accepted_tokens <= 2 * stats.num_drafts
    assert stats.accepted_per_rank.sum() == stats.num_accepted_tokens


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(tree=[2, 0]), "tree: the branch at depth 2 is 0"),
        (dict(tree=[4, 4]), "tree: tree 4,4 has 20 draft nodes; one verify holds at most 16 rows"),
        (dict(tree_nodes=0), "tree_nodes must be >= 1"),
        (dict(tree_nodes=16), "tree_nodes: tree nodes=16 has 16 draft nodes"),
        (dict(tree=[2], tree_nodes=4), "not both"),
        (dict(tree=[2], draft="lookup"), 'tree needs draft="mtp": the lookup drafter cannot branch'),
        (dict(tree=[2], accept="relaxed", temperature=1.0), "accept relaxed does not support trees"),
        (dict(tree=[2], k="auto"), "k auto cannot choose it"),
        (dict(tree_nodes=8, sample_drafts=True), "takes argmax drafts; sample_drafts needs a static tree"),
    ],
)
def test_bad_trees_raise_value_error(model: mtpspec.Model, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        model.generate(PROMPT, 8, **options)
