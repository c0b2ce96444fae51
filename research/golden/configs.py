"""The fixture configs (glm_a, dsv32_b, glm47_c, dsv3_d), their seeds and sizes, and what differs between the
model types (two with a DSA indexer, two without).

Also the 1-layer config of the same family that the MTP layer is built from."""

from __future__ import annotations

from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    Glm4MoeLiteConfig,
    Glm4MoeLiteForCausalLM,
    GlmMoeDsaConfig,
    GlmMoeDsaForCausalLM,
)


PROMPT_LEN = 40  # T
DECODE_STEPS = 4  # n
MTP_CHAIN_STEPS = 3  # k
FIRST_CHUNK_LENGTHS = (23, 5)  # two-chunk prefill self-checks: one split above K, one below

SEEDS = {
    "glm_a": {"weights": 1234, "mtp_weights": 1235, "prompt": 99},
    "dsv32_b": {"weights": 4321, "mtp_weights": 4322, "prompt": 77},
    "glm47_c": {"weights": 4747, "mtp_weights": 4748, "prompt": 47},
    "dsv3_d": {"weights": 3030, "mtp_weights": 3031, "prompt": 30},
}


# What every fixture model shares: 4 layers (layer 0 dense), 4 heads, 8 experts of which 2 per
# token plus 1 shared, one MTP layer, fp32 eager attention and experts.
TINY = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    moe_intermediate_size=16,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    q_lora_rank=48,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    v_head_dim=16,
    first_k_dense_replace=1,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_shared_experts=1,
    norm_topk_prob=True,
    num_nextn_predict_layers=1,
    attn_implementation="eager",
    experts_implementation="eager",
)

# The DeepSeek fixtures' RoPE. YaRN with d_r = 16, base 1e4, L0 = 64: correction range lo = 0, hi = 3,
# so the ramp is [0, 1/3, 2/3, 1, 1, 1, 1, 1]: pairs 1 and 2 are partly interpolated, 3..7 fully.
DEEPSEEK_TINY = dict(
    qk_rope_head_dim=16,
    n_group=4,
    topk_group=2,
    routed_scaling_factor=2.5,
    rms_norm_eps=1e-6,
    rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    max_position_embeddings=256,
)

# The GLM fixtures' routing and RoPE (plain, interleaved).
GLM_TINY = dict(
    qk_rope_head_dim=8,
    n_group=1,
    topk_group=1,
    rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    rope_interleave=True,
    max_position_embeddings=128,
)


def glm_a_config() -> GlmMoeDsaConfig:
    return GlmMoeDsaConfig(
        **TINY,
        **GLM_TINY,
        index_n_heads=8,
        index_head_dim=16,
        index_topk=8,
        indexer_types=["full", "full", "shared", "full"],
        routed_scaling_factor=2.5,
        indexer_rope_interleave=True,
    )


def dsv32_b_config() -> DeepseekV32Config:
    return DeepseekV32Config(**TINY, **DEEPSEEK_TINY, index_n_heads=8, index_head_dim=32, index_topk=8)


def glm47_c_config() -> Glm4MoeLiteConfig:
    # GLM-4.7-Flash architecture: MLA + MoE, no indexer, default RoPE. Glm4MoeLiteConfig has no
    # first_k_dense_replace / num_nextn_predict_layers fields; both are passed (as the release's config.json
    # has them) and kept as extra keys. HF builds the MLP kinds from mlp_layer_types only.
    return Glm4MoeLiteConfig(**TINY, **GLM_TINY, mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
                             routed_scaling_factor=1.8)


def dsv3_d_config() -> DeepseekV3Config:
    # DeepSeek-V3: MLA + MoE, no indexer. Same sizes and YaRN as dsv32_b (d_r = 16, so the same ramp).
    return DeepseekV3Config(**TINY, **DEEPSEEK_TINY, rope_interleave=True)


class Family:
    """What differs between the model types."""

    def __init__(self, model_type: str):
        self.model_type = model_type
        # mtp_copies: what the MTP layer holds besides the block. None: no embed_tokens / shared_head.head
        # (GLM-5.2 layer 78). "noisy": copies that differ from the main weights, so a test can tell which
        # ones are used. "equal": bit-for-bit copies of the main weights, as DeepSeek-V3's release has them.
        if model_type == "glm_moe_dsa":
            self.model_cls = GlmMoeDsaForCausalLM
            self.config_cls = GlmMoeDsaConfig
            prefix = "GlmMoeDsa"
            self.expected_indexer_rope = "interleaved"  # docs/models.md, "The DSA lightning indexer"
            self.mtp_copies = None
        elif model_type == "deepseek_v32":
            self.model_cls = DeepseekV32ForCausalLM
            self.config_cls = DeepseekV32Config
            prefix = "DeepseekV32"
            self.expected_indexer_rope = "half-split"
            self.mtp_copies = "noisy"  # DeepSeek layer 61 ships both copies
        elif model_type == "glm4_moe_lite":
            self.model_cls = Glm4MoeLiteForCausalLM
            self.config_cls = Glm4MoeLiteConfig
            prefix = "Glm4MoeLite"
            self.expected_indexer_rope = None
            self.mtp_copies = "noisy"  # GLM-4.7-Flash layer 47 ships both copies; vLLM uses them
        elif model_type == "deepseek_v3":
            self.model_cls = DeepseekV3ForCausalLM
            self.config_cls = DeepseekV3Config
            prefix = "DeepseekV3"
            self.expected_indexer_rope = None
            self.mtp_copies = "equal"  # transformers' use_mtp drafts with the trunk's embedding and head
        else:
            raise ValueError(model_type)
        self.has_indexer = self.expected_indexer_rope is not None
        import importlib

        self.modeling = importlib.import_module(self.model_cls.__module__)
        self.decoder_layer_cls = getattr(self.modeling, prefix + "DecoderLayer")
        self.rmsnorm_cls = getattr(self.modeling, prefix + "RMSNorm")
        self.rotary_cls = getattr(self.modeling, prefix + "RotaryEmbedding")
        self.indexer_cls = getattr(self.modeling, prefix + "Indexer", None)

    def mla_rope_style(self, config) -> str:
        """The main MLA RoPE pairing HF uses: the DSA classes are hard-coded interleaved; DeepseekV3 and
        Glm4MoeLite read `rope_interleave` (interleaved when true, half-split rotate_half when false)."""
        if self.has_indexer:
            return "interleaved"
        return "interleaved" if config.rope_interleave else "half-split"


def indexer_types_of(config) -> list[str]:
    """Per layer: "full" (runs its indexer), "shared" (IndexShare) or "dense" (no indexer: attends to every causal key)."""
    if not hasattr(config, "index_topk"):
        return ["dense"] * config.num_hidden_layers
    # DeepSeek-V3.2 has no IndexShare: every layer runs its indexer.
    return list(getattr(config, "indexer_types", None) or ["full"] * config.num_hidden_layers)


def mlp_layer_types_of(config) -> list[str]:
    """Per layer "dense" / "sparse". DeepseekV3Config has no mlp_layer_types: layer l is sparse iff
    l >= first_k_dense_replace (modeling_deepseek_v3.py, DeepseekV3DecoderLayer)."""
    types = getattr(config, "mlp_layer_types", None)
    if types is not None:
        return list(types)
    return ["dense" if l < config.first_k_dense_replace else "sparse" for l in range(config.num_hidden_layers)]


# --------------------------------------------------------------------------------------------
# MTP layer config: the trunk's family, one sparse layer (with its own indexer where the family has one) (docs/models.md, "The MTP layer as a drafter")
# --------------------------------------------------------------------------------------------


def single_layer_config(trunk_config, family: Family):
    """A 1-layer config of the same family whose only layer is a sparse MoE layer (with its own indexer
    where the family has one)."""
    fields = trunk_config.to_dict()
    fields.update(num_hidden_layers=1, first_k_dense_replace=0)
    if family.has_indexer:
        fields.update(mlp_layer_types=["sparse"], layer_types=["indexed_attention"])
    elif family.model_type == "glm4_moe_lite":
        fields.update(mlp_layer_types=["sparse"])
    # deepseek_v3: first_k_dense_replace = 0 makes layer 0 sparse
    if family.model_type == "glm_moe_dsa":
        fields["indexer_types"] = ["full"]  # the MTP layer always owns and runs an indexer
    for key in ("transformers_version", "architectures", "model_type"):
        fields.pop(key, None)
    config = family.config_cls(**fields, attn_implementation="eager", experts_implementation="eager")
    return config
