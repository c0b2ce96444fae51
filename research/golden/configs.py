"""The fixture configs (glm_a, dsv32_b), their seeds and sizes, and what differs between the two model types.

Also the 1-layer config of the same family that the MTP layer is built from."""

from __future__ import annotations

from transformers import (
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
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
}


def glm_a_config() -> GlmMoeDsaConfig:
    return GlmMoeDsaConfig(
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
        qk_rope_head_dim=8,
        v_head_dim=16,
        index_n_heads=8,
        index_head_dim=16,
        index_topk=8,
        indexer_types=["full", "full", "shared", "full"],
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        rope_interleave=True,
        indexer_rope_interleave=True,
        num_nextn_predict_layers=1,
        max_position_embeddings=128,
        attn_implementation="eager",
        experts_implementation="eager",
    )


def dsv32_b_config() -> DeepseekV32Config:
    # YaRN with d_r = 16, base 1e4, L0 = 64: correction range lo = 0, hi = 3, so the ramp is
    # [0, 1/3, 2/3, 1, 1, 1, 1, 1]: pairs 1 and 2 are partly interpolated, 3..7 fully.
    return DeepseekV32Config(
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
        qk_rope_head_dim=16,
        v_head_dim=16,
        index_n_heads=8,
        index_head_dim=32,
        index_topk=8,
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
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
        num_nextn_predict_layers=1,
        max_position_embeddings=256,
        attn_implementation="eager",
        experts_implementation="eager",
    )


class Family:
    """What differs between the two model types."""

    def __init__(self, model_type: str):
        self.model_type = model_type
        if model_type == "glm_moe_dsa":
            self.model_cls = GlmMoeDsaForCausalLM
            self.config_cls = GlmMoeDsaConfig
            self.expected_indexer_rope = "interleaved"  # docs/models.md, "The DSA lightning indexer"
            self.mtp_has_copies = False  # GLM-5.2 layer 78: no embed_tokens / shared_head.head
        elif model_type == "deepseek_v32":
            self.model_cls = DeepseekV32ForCausalLM
            self.config_cls = DeepseekV32Config
            self.expected_indexer_rope = "half-split"
            self.mtp_has_copies = True  # DeepSeek layer 61 ships both copies
        else:
            raise ValueError(model_type)
        import importlib

        self.modeling = importlib.import_module(self.model_cls.__module__)
        prefix = "GlmMoeDsa" if model_type == "glm_moe_dsa" else "DeepseekV32"
        self.decoder_layer_cls = getattr(self.modeling, prefix + "DecoderLayer")
        self.rmsnorm_cls = getattr(self.modeling, prefix + "RMSNorm")
        self.rotary_cls = getattr(self.modeling, prefix + "RotaryEmbedding")
        self.indexer_cls = getattr(self.modeling, prefix + "Indexer")


def indexer_types_of(config) -> list[str]:
    # DeepSeek-V3.2 has no IndexShare: every layer runs its indexer.
    return list(getattr(config, "indexer_types", None) or ["full"] * config.num_hidden_layers)


# --------------------------------------------------------------------------------------------
# MTP layer config: the trunk's family, one sparse layer with its own indexer (docs/models.md, "The MTP layer as a drafter")
# --------------------------------------------------------------------------------------------


def single_layer_config(trunk_config, family: Family):
    """A 1-layer config of the same family whose only layer is a sparse MoE layer with its own indexer."""
    fields = trunk_config.to_dict()
    fields.update(
        num_hidden_layers=1,
        first_k_dense_replace=0,
        mlp_layer_types=["sparse"],
        layer_types=["indexed_attention"],
    )
    if family.model_type == "glm_moe_dsa":
        fields["indexer_types"] = ["full"]  # the MTP layer always owns and runs an indexer
    for key in ("transformers_version", "architectures", "model_type"):
        fields.pop(key, None)
    config = family.config_cls(**fields, attn_implementation="eager", experts_implementation="eager")
    return config
