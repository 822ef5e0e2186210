"""Models as llama.cpp stores them: the tensor list of each architecture (GGUF names and shapes, as llama.cpp's
loader creates them), llama.cpp's per-tensor type rules (src/llama-quant.cpp), ggml's and ik_llama.cpp's block
sizes, the geometry's layer kinds and caches, and published parameter counts of the shipped configs."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import ROOT

from sim.core.errors import ScenarioError
from sim.modelfiles import read_gguf, read_hf_config
from sim.modelfiles.ggml_types import TYPES, tensor_bytes
from sim.modelfiles.llama_quant import Slot, Target, quantized_types, recipe

MODELS = os.path.join(ROOT, "calibration", "models")


def model(name: str, quant: str | None = None):
    return read_hf_config(os.path.join(MODELS, f"{name}.json"), quant)


def types(g) -> dict[str, str]:
    return {t.name: t.qtype for t in g.tensors}


# --- llama.cpp's rules ---------------------------------------------------------------------------------------------

def test_q4_k_m_raises_attn_v_and_ffn_down_in_use_more_bits_layers_and_the_head_to_q6_k():
    t = types(model("llama-3.1-8b", "Q4_K_M"))
    # use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2
    more = [i for i in range(32) if i < 4 or i >= 28 or (i - 4) % 3 == 2]
    assert [i for i in range(32) if t[f"blk.{i}.attn_v.weight"] == "Q6_K"] == more
    assert [i for i in range(32) if t[f"blk.{i}.ffn_down.weight"] == "Q6_K"] == more
    assert {t[f"blk.{i}.attn_q.weight"] for i in range(32)} == {"Q4_K"}
    assert t["output.weight"] == "Q6_K" and t["token_embd.weight"] == "Q4_K"
    assert {t[n] for n in t if n.endswith("norm.weight")} == {"F32"}


def test_a_tied_embedding_is_quantized_as_the_output_head():
    t = types(model("llama-3.2-1b", "Q4_K_M"))
    assert "output.weight" not in t and t["token_embd.weight"] == "Q6_K"


def test_eight_experts_raise_attn_k_and_attn_v_to_q8_0_and_70b_attn_v_to_q5_k():
    t = types(model("mixtral-8x22b", "Q4_K_M"))
    assert {t[f"blk.{i}.attn_v.weight"] for i in range(56)} == {"Q8_0"}
    assert {t[f"blk.{i}.attn_k.weight"] for i in range(56)} == {"Q8_0"}
    assert {t[f"blk.{i}.attn_output.weight"] for i in range(56)} == {"Q5_K"}
    t = types(model("llama-3-70b", "Q4_K_M"))  # 80 blocks with grouped KV heads: LLM_TYPE_70B
    assert {t[f"blk.{i}.attn_v.weight"] for i in range(80)} == {"Q5_K", "Q6_K"}


def test_rows_that_do_not_hold_whole_blocks_fall_back():
    """DeepSeek-V2-Lite: experts' ffn_down rows of 1408 (not a multiple of 256): Q4_K -> Q5_0, Q6_K -> Q8_0; its
    attn_k_b rows of 128 (qk_nope_head_dim) -> Q5_0; gpt-oss rows of 2880 likewise."""
    t = types(model("deepseek-v2-lite", "Q4_K_M"))
    assert {t[f"blk.{i}.ffn_down_exps.weight"] for i in range(1, 27)} == {"Q5_0", "Q8_0"}
    assert t["blk.5.attn_k_b.weight"] == "Q5_0" and t["blk.5.attn_v_b.weight"] == "Q4_K"
    t = types(model("gpt-oss-20b", "Q4_K_M"))
    assert t["blk.0.ffn_up_exps.weight"] == "Q5_0"


def test_mxfp4_moe_gives_three_dimensional_tensors_mxfp4_and_the_rest_q8_0():
    g = model("gpt-oss-20b", "MXFP4_MOE")
    t = types(g)
    assert t["blk.0.ffn_gate_exps.weight"] == "MXFP4" and t["blk.0.attn_q.weight"] == "Q8_0"
    assert t["output.weight"] == "Q8_0" and t["blk.0.ffn_gate_exps.bias"] == "F32"
    assert t["blk.0.attn_sinks.weight"] == "F32" and t["blk.0.ffn_gate_inp.weight"] == "F32"
    # the converter's float file keeps the checkpoint's MXFP4 experts
    assert types(model("gpt-oss-20b", "F16"))["blk.0.ffn_down_exps.weight"] == "MXFP4"


def test_an_importance_matrix_changes_iq4_xs_ffn_down():
    plain, i1 = types(model("qwen3-30b-a3b", "IQ4_XS")), types(model("qwen3-30b-a3b", "i1-IQ4_XS"))
    assert plain["blk.0.ffn_down_exps.weight"] == "Q5_K" and i1["blk.0.ffn_down_exps.weight"] == "IQ4_XS"
    assert plain["blk.0.attn_v.weight"] == i1["blk.0.attn_v.weight"] == "Q5_K"  # n_gqa 8 >= 4


def test_a_linear_attention_layer_s_qkv_counts_as_a_value_tensor():
    t = types(model("qwen3.5-35b-a3b", "Q4_K_M"))
    assert t["blk.0.attn_qkv.weight"] == "Q6_K" and t["blk.3.attn_v.weight"] in ("Q4_K", "Q6_K")
    assert t["blk.0.ssm_conv1d.weight"] == "F32" and t["blk.0.ssm_a"] == "F32"


def test_the_rules_walk_tensors_in_the_loader_s_order():
    """Counters (i_attention_wv) follow llama.cpp's weight_name_comparer: block, then name; the order given does
    not matter."""
    slots = [Slot(f"blk.{b}.attn_v.weight", (256, 256)) for b in range(16)]
    target = Target("llama", 0, 1, 16)
    forward = quantized_types(slots, recipe("Q3_K_M"), target)
    backward = quantized_types(slots[::-1], recipe("Q3_K_M"), target)[::-1]
    assert forward == backward and forward[:2] == ["Q5_K", "Q5_K"] and set(forward[2:]) == {"Q4_K"}


def test_ggml_and_ik_llama_block_sizes():
    assert tensor_bytes("Q4_K", (4096, 2)) == 2 * 16 * 144
    assert TYPES["IQ4_KS"].bits == 4.25 and tensor_bytes("IQ4_KS", (256, 3)) == 3 * (4 + 136)
    assert TYPES["IQ1_S_R4"].bits == 1.5 and TYPES["IQ4_XS_R8"].bits == TYPES["IQ4_XS"].bits
    assert TYPES["IQ2_K"].bits == 2.375 and TYPES["IQ6_K"].bits == 6.625 and TYPES["Q6_0"].bits == 6.5
    with pytest.raises(ValueError, match="whole number"):
        tensor_bytes("Q4_K", (100, 1))
    g = model("deepseek-v2-lite", "IQ4_KS")
    assert any("ik_llama.cpp" in n for n in g.notes) and types(g)["blk.3.ffn_up_exps.weight"] == "IQ4_KS"


# --- geometry --------------------------------------------------------------------------------------------------------

def test_hybrid_linear_attention_state_and_mtp_blocks():
    g = model("qwen3.5-35b-a3b", "Q4_K_M")
    assert g.layer_kinds.count("linear") == 30 and g.layer_kinds.count("full") == 10
    assert (g.linear_key_heads, g.linear_value_heads, g.linear_key_head_dim, g.linear_conv_kernel) == (16, 32, 128, 4)
    conv = 3 * (2 * 16 * 128 + 32 * 128)  # the last kernel - 1 inputs of q, k and v
    assert g.recurrent_state_bytes == 4 * (conv + 32 * 128 * 128)
    assert g.kv_bytes_per_token == 10 * 2 * 2 * 256 * 2 and g.kv_bytes_per_layer_f16 == 2 * 2 * 256 * 2
    assert g.mtp_tensors and all(t.block == 40 for t in g.mtp_tensors) and g.mtp_bytes > 0
    assert g.total_params == pytest.approx(35e9, rel=0.03)  # "35B in total and 3B activated" (model card)
    roles = {t.role for t in g.tensors}
    assert roles == {"embedding", "output", "output_norm", "attention", "ffn", "experts"}
    assert g.weights_bytes == sum(t.bytes for t in g.tensors)


def test_mla_dims_and_sliding_windows():
    d = model("deepseek-v3")
    assert (d.kv_lora_rank, d.q_lora_rank, d.qk_rope_head_dim, d.qk_nope_head_dim, d.v_head_dim) == \
        (512, 1536, 64, 128, 128)
    assert set(d.layer_kinds) == {"mla"} and d.kv_bytes_per_layer_f16 == (512 + 64) * 2
    assert (d.head_dim, d.value_head_dim) == (192, 128)
    o = model("gpt-oss-20b")
    assert o.sliding_window == 128 and o.layer_kinds[:2] == ("sliding", "full")
    gem = model("gemma-3-27b", "Q4_K_M")  # five sliding layers to one global; text_config read over the wrapper
    assert gem.layer_kinds[:6] == ("sliding",) * 5 + ("full",) and gem.sliding_window == 1024
    assert (gem.heads, gem.kv_heads, gem.head_dim) == (32, 16, 128)


def test_the_dense_and_expert_roles_follow_from_the_tensors():
    g = model("qwen3-30b-a3b", "Q4_K_M")
    experts = [t for t in g.tensors if t.role == "experts"]
    assert g.expert_bytes == pytest.approx(sum(t.bytes for t in experts) / (48 * 128))
    assert g.dense_bytes == pytest.approx(sum(t.bytes for t in g.tensors if t.role != "experts"))
    assert g.bits_per_weight_dense == pytest.approx(8 * g.dense_bytes / g.dense_params)
    assert {t.role for t in g.tensors if ".ffn_gate_inp." in t.name} == {"ffn"}


# published totals: (config, total, active or None, source)
PUBLISHED = [
    ("qwen2.5-7b", 7.61e9, None, "https://huggingface.co/Qwen/Qwen2.5-7B: Number of Parameters 7.61B"),
    ("qwen2.5-14b", 14.7e9, None, "https://huggingface.co/Qwen/Qwen2.5-14B: Number of Parameters 14.7B"),
    ("qwen3-4b", 4.0e9, None, "https://huggingface.co/Qwen/Qwen3-4B: Number of Parameters 4.0B"),
    ("qwen3-32b", 32.8e9, None, "https://huggingface.co/Qwen/Qwen3-32B: Number of Parameters 32.8B"),
    ("qwen3.5-122b-a10b", 122e9, 10e9, "https://huggingface.co/Qwen/Qwen3.5-122B-A10B: 122B total, 10B activated"),
    ("qwen3.6-35b-a3b", 35e9, 3e9, "docs/research/gb10_qwen36.md: the card's 35B in total and 3B activated"),
    ("llama-3.2-1b", 1.23e9, None, "https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct: 1.23B parameters"),
    ("llama-3.2-3b", 3.21e9, None, "https://huggingface.co/meta-llama/Llama-3.2-3B-Instruct: 3.21B parameters"),
    ("mixtral-8x22b", 141e9, 39e9, "https://mistral.ai/news/mixtral-8x22b: 39B active of 141B"),
    ("phi-2", 2.7e9, None, "https://huggingface.co/microsoft/phi-2: 2.7 billion parameters"),
    ("tinyllama-1.1b", 1.1e9, None, "https://huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0: 1.1B parameters"),
    ("gemma-3-4b", 3.88e9, None, "https://github.com/unslothai/unsloth/issues/2744: llama.cpp prints model params "
                                 "3.88 B for gemma-3-4b-it-qat (text model)"),
]


@pytest.mark.parametrize("name, total, active, source", PUBLISHED)
def test_published_parameter_counts_within_3_percent(name, total, active, source):
    g = model(name)
    assert g.total_params == pytest.approx(total, rel=0.03), source
    if active is not None:  # "A3B", "A10B": rounded; the smaller of with and without the embedding table
        counted = min(g.active_params_per_token, g.active_params_per_token - g.embedding_params,
                      key=lambda n: abs(n - active))
        assert counted == pytest.approx(active, rel=0.05), source


# --- architectures from small configs --------------------------------------------------------------------------------

def small(model_type: str, **extra) -> dict:
    return {"model_type": model_type, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512, "vocab_size": 1024,
            "tie_word_embeddings": False, **extra}


ARCH_TENSORS = [  # model_type, extra keys, tensors of block 1 that llama.cpp's loader creates (src/models/*.cpp)
    ("glm4", {}, {"attn_q.bias", "ffn_up.weight", "post_attention_norm.weight", "post_ffw_norm.weight"}),
    ("granitemoe", {"num_local_experts": 8, "num_experts_per_tok": 2},
     {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight"}),
    ("hunyuan_v1_moe", {"num_experts": 8, "moe_topk": 2, "moe_intermediate_size": [128] * 4,
                        "num_shared_expert": [1] * 4},
     {"attn_q_norm.weight", "ffn_gate_shexp.weight", "ffn_up_exps.weight"}),
    ("llama4", {"num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                "intermediate_size_mlp": 1024}, {"ffn_gate_inp.weight", "ffn_up_shexp.weight"}),
    ("dots1", {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_shared_experts": 2,
               "first_k_dense_replace": 1}, {"exp_probs_b.bias", "ffn_down_shexp.weight", "attn_k_norm.weight"}),
    ("phi3", {}, {"attn_qkv.weight", "ffn_up.weight", "ffn_down.weight"}),
    ("glm4_moe_lite", {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                       "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 64, "q_lora_rank": 96,
                       "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32},
     {"attn_q_a.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight", "exp_probs_b.bias"}),
]


@pytest.mark.parametrize("model_type, extra, expected", ARCH_TENSORS)
def test_each_architecture_lists_llama_cpp_s_tensors(tmp_path, model_type, extra, expected):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(small(model_type, **extra)))
    g = read_hf_config(str(path), "Q8_0")
    names = {t.name.removeprefix("blk.1.") for t in g.tensors if t.block == 1}
    assert expected <= names, names
    assert g.weights_bytes == sum(t.bytes for t in g.tensors) and g.layers == 4


def test_a_llama4_shared_expert_and_a_k_b_shape():
    t = {s.name: s for s in read_hf_config(os.path.join(MODELS, "deepseek-v2-lite.json")).tensors}
    assert t["blk.1.attn_k_b.weight"].shape == (128, 512, 16) and t["blk.1.attn_v_b.weight"].shape == (512, 128, 16)
    assert t["blk.1.ffn_down_exps.weight"].shape == (1408, 2048, 64)


def test_an_unknown_architecture_names_its_model_type_and_the_fields_needed(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["FooForCausalLM"], "model_type": "foo", "hidden_size": 8}))
    with pytest.raises(ScenarioError) as e:
        read_hf_config(str(path))
    text = str(e.value)
    assert "\n" not in text and "'foo'" in text and "num_hidden_layers" in text and "vocab_size" in text
    path.write_text(json.dumps({"model_type": "bar_vl", "text_config": {"model_type": "bar_text"}}))
    with pytest.raises(ScenarioError, match="bar_text"):
        read_hf_config(str(path))


# --- GGUF ------------------------------------------------------------------------------------------------------------

def test_a_gguf_gives_its_own_tensor_list(tmp_path):
    from test_modelfiles import write_gguf

    path = tmp_path / "tiny.gguf"
    write_gguf(path, layers=3, leading_dense=1)
    g = read_gguf(str(path))
    t = {s.name: s for s in g.tensors}
    assert t["blk.1.ffn_up_exps.weight"].qtype == "Q8_0" and t["blk.1.ffn_up_exps.weight"].role == "experts"
    assert t["blk.0.attn_norm.weight"].qtype == "F32" and t["blk.1.ffn_gate_inp.weight"].role == "ffn"
    assert t["token_embd.weight"].role == "embedding" and t["output_norm.weight"].role == "output_norm"
    assert t["blk.1.ffn_up_exps.weight"].elements == int(np.prod(t["blk.1.ffn_up_exps.weight"].shape))
    assert g.bytes_from == "gguf" and set(g.layer_kinds) == {"full"}
    assert g.weights_bytes == sum(s.bytes for s in g.tensors)
