"""The model types without a DSA indexer from Python: the golden glm4_moe_lite and deepseek_v3
models load with their config's facts, draft with their MTP layer, and speculative output equals
plain output; the indexer's options are refused; the synthetic rates take all three forms."""

from __future__ import annotations

import numpy as np
import pytest

import mtpspec
from conftest import ROOT, THREADS

GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize("name, model_type", [("glm47_c", "glm4_moe_lite"), ("dsv3_d", "deepseek_v3")])
def test_loads_and_speculation_equals_plain(name: str, model_type: str) -> None:
    model = mtpspec.Model.load(GOLDEN / name, threads=THREADS)
    c = model.config
    assert c["model_type"] == model_type
    assert c["has_indexer"] is False and c["index_topk"] is None
    assert c["mtp_chain_default"] == "raw"
    ids = list(range(3, 43))  # longer than the DSA goldens' index_topk of 8: still dense
    for temperature in (0.0, 0.8):
        plain = model.generate(ids, 24, draft="none", temperature=temperature, seed=5)
        for chain in ("default", "normed", "raw"):
            spec = model.generate(ids, 24, k=3, temperature=temperature, seed=5, mtp_chain=chain)
            assert spec.tokens == plain.tokens, (name, temperature, chain)
    # The default chain is the type's: raw, bit for bit, and the later steps differ from normed.
    default, raw, normed = (model.mtp_draft(ids, 3, chain=c) for c in ("default", "raw", "normed"))
    assert np.array_equal(default.probs, raw.probs)
    assert not np.array_equal(default.probs[1:], normed.probs[1:])


def test_indexer_options_are_refused() -> None:
    with pytest.raises(ValueError, match="glm4_moe_lite model, which has no DSA indexer"):
        mtpspec.Model.load(GOLDEN / "glm47_c", index_keys="bf16")
    model = mtpspec.Model.load(GOLDEN / "glm47_c", threads=THREADS)
    with pytest.raises(ValueError, match="mtp_index_share shared: glm4_moe_lite has no DSA indexer"):
        model.generate([1, 2, 3], 4, mtp_index_share="shared")


def test_synthetic_rate_forms() -> None:
    model = mtpspec.Model.load(GOLDEN / "dsv3_d", threads=THREADS)
    runs = [model.generate([1, 2, 3], 32, k=2, accept="synthetic", **form).tokens
            for form in ({"synthetic_rates": [1.0, 0.5]}, {"synthetic_rates_unconditional": [1.0, 0.5]},
                         {"synthetic_acceptance_length": 2.5})]
    assert runs[0] == runs[1] == runs[2]
    with pytest.raises(ValueError, match=r"synthetic_rates_unconditional\[1\] = 0.7 rises"):
        model.generate([1, 2, 3], 4, k=2, accept="synthetic", synthetic_rates_unconditional=[0.5, 0.7])
    with pytest.raises(ValueError, match="give the synthetic rates in one form"):
        model.generate([1, 2, 3], 4, k=2, accept="synthetic", synthetic_rates=[0.5, 0.5],
                       synthetic_acceptance_length=2.0)
