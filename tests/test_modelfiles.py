"""Model geometry from config.json and GGUF files: the published parameter counts of real models, the bytes of a GGUF
the test writes itself, quantization arithmetic, one-line errors and the ``sim model`` command."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import CALIBRATION

from sim.cli import main
from sim.config.models import ModelSpec
from sim.core.errors import ScenarioError
from sim.modelfiles import dense_fields, model_fields, moe_fields, read_gguf, read_hf_config, read_model_file
from sim.modelfiles.llama_quant import recipe
from sim.modelfiles.quant import gguf_quant, kv_bytes, type_bits

MODELS = os.path.join(CALIBRATION, "models")


def example(name: str) -> str:
    return os.path.join(MODELS, name)


# Published totals (model cards). ``active_kind``: "all" counts the input embedding table as active (Qwen, Mistral,
# Meta), "no_embedding" leaves it out (OpenAI's 3.6B for gpt-oss-20b, DeepSeek's 36.6B of which 0.9B output head).
PUBLISHED = [
    ("qwen3-30b-a3b.json", 30.5e9, 3.3e9, "all"),
    ("gpt-oss-20b.json", 20.9e9, 3.6e9, "no_embedding"),
    ("mixtral-8x7b.json", 46.7e9, 12.9e9, "all"),
    ("deepseek-v3.json", 671e9, 37e9, "all"),  # MTP layer excluded (the 685B of the repository includes it)
    ("deepseek-v3.json", 671e9, 36.6e9, "no_embedding"),  # DeepSeek's own count: activation 36.6B
    ("llama-3.1-8b.json", 8.03e9, 8.03e9, "all"),
    ("qwen3-235b-a22b.json", 235e9, 22e9, "all"),
]


@pytest.mark.parametrize("name, total, active, active_kind", PUBLISHED)
def test_published_parameter_counts_within_3_percent(name, total, active, active_kind):
    g = read_hf_config(example(name))
    assert g.total_params == pytest.approx(total, rel=0.03)
    counted = g.active_params_per_token - (g.embedding_params if active_kind == "no_embedding" else 0)
    assert counted == pytest.approx(active, rel=0.03)
    assert g.total_params == g.dense_params + g.expert_params * g.experts_per_layer * g.moe_layers
    assert g.active_params_per_token == g.dense_params + g.top_k * g.expert_params * g.moe_layers


def test_qwen3_next_total_and_hybrid_attention():
    g = read_hf_config(example("qwen3-next-80b-a3b.json"))
    assert g.total_params == pytest.approx(80e9, rel=0.03)  # "A3B": 3.9B active counted here, see the report
    assert (g.layers, g.moe_layers, g.experts_per_layer, g.top_k, g.shared_experts) == (48, 48, 512, 10, 1)
    assert g.attention_layers == 12  # full_attention_interval 4: the other 36 are Gated DeltaNet
    assert g.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2
    assert g.expert_params == 3 * 2048 * 512
    assert any("linear-attention" in n for n in g.notes)


def test_exact_geometry_of_the_examples():
    q = read_hf_config(example("qwen3-30b-a3b.json"))
    assert (q.architecture, q.layers, q.moe_layers, q.experts_per_layer, q.top_k) == ("qwen3_moe", 48, 48, 128, 8)
    assert q.expert_params == 3 * 2048 * 768 and q.expert_bytes == 3 * 2048 * 768 * 2
    assert q.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2 and q.quant == "BF16"
    d = read_hf_config(example("deepseek-v3.json"))
    assert (d.layers, d.moe_layers, d.shared_experts, d.experts_per_layer) == (61, 58, 1, 256)  # 3 dense blocks
    assert d.kv_bytes_per_token == 61 * (512 + 64) * 2  # the MLA latent, not 128 heads of K and V
    assert d.quant == "FP8" and any("multi-token" in n for n in d.notes)
    o = read_hf_config(example("gpt-oss-20b.json"))
    assert o.expert_params == 3 * 2880 * 2880 + 2 * 2880 + 2880  # gate_up and down, with their biases
    assert o.attention_layers == 12 and o.kv_bytes_per_token == 12 * 2 * 8 * 64 * 2  # sliding layers: a note
    experts = 24 * 32 * 3 * 2880 * 2880  # MXFP4 (4.25 bits), their biases BF16
    biases = 24 * 32 * 3 * 2880
    assert o.bits_per_weight_experts == pytest.approx((experts * 4.25 + biases * 16) / (experts + biases))
    assert o.bits_per_weight_dense == 16
    # the published checkpoint (model.safetensors.index.json total_size): experts MXFP4, the rest BF16
    assert o.weights_bytes == pytest.approx(13_761_264_768, rel=0.005)
    m = read_hf_config(example("mixtral-8x7b.json"))
    assert m.head_dim == 128 and m.kv_heads == 8 and m.expert_params == 3 * 4096 * 14336
    llama = read_hf_config(example("llama-3.1-8b.json"))
    assert not llama.is_moe and llama.expert_bytes == 0 and llama.weights_bytes == llama.dense_bytes
    assert llama.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2


def test_examples_name_their_source_and_the_reader_ignores_underscore_keys(tmp_path):
    for name in (n for n in os.listdir(MODELS) if n.endswith(".json")):
        raw = json.load(open(example(name)))
        assert raw["_source"].startswith("https://"), name
    raw = json.load(open(example("llama-3.1-8b.json")))
    raw["_num_hidden_layers"] = "not a number"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert read_hf_config(str(tmp_path)).total_params == read_hf_config(example("llama-3.1-8b.json")).total_params


def qwen2_moe_a2_7b() -> dict:
    """Qwen1.5-MoE-A2.7B's geometry (published: 14.3B total, 2.7B active)."""
    return {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
            "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
            "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
            "num_experts_per_tok": 4, "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def glm45_air() -> dict:
    """GLM-4.5-Air's geometry as transformers' glm4_moe conversion script writes it (published: 106B, 12B active)."""
    return {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True,
            "head_dim": 128, "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
            "num_attention_heads": 96, "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8,
            "first_k_dense_replace": 1, "num_hidden_layers": 46, "num_key_value_heads": 8, "vocab_size": 151552,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "num_nextn_predict_layers": 1}


def write_config(tmp_path, cfg: dict, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


def test_qwen2_moe_and_glm45_air_against_their_published_totals(tmp_path):
    q = read_hf_config(write_config(tmp_path, qwen2_moe_a2_7b(), "q.json"))
    assert q.total_params == pytest.approx(14.3e9, rel=0.03) and q.shared_experts == 1
    assert q.active_params_per_token == pytest.approx(2.7e9, rel=0.03)
    g = read_hf_config(write_config(tmp_path, glm45_air(), "g.json"))
    assert (g.layers, g.moe_layers, g.shared_experts) == (46, 45, 1)
    assert g.total_params == pytest.approx(106e9, rel=0.03)
    # 12.8B active without the embedding table, 13.4B with it: the published 12B matches leaving out the output
    # head too (12.2B), a count this reader does not make (an inference from the published figure, not a rule)
    assert g.active_params_per_token - 2 * g.embedding_params == pytest.approx(12e9, rel=0.03)


def test_sparse_step_and_dense_only_layers_make_dense_blocks(tmp_path):
    cfg = qwen2_moe_a2_7b() | {"decoder_sparse_step": 2, "mlp_only_layers": [1]}
    g = read_hf_config(write_config(tmp_path, cfg))
    assert g.moe_layers == 11  # layers 1, 3, ..., 23 by the step, less layer 1 (dense only)
    base = read_hf_config(write_config(tmp_path, qwen2_moe_a2_7b(), "base.json"))
    assert g.total_params < base.total_params  # dense blocks in place of 60 experts


def test_quantization_arithmetic():
    assert type_bits(__import__("gguf").GGMLQuantizationType.Q4_K) == 4.5
    assert [type_bits(n) for n in ("Q8_0", "Q6_K", "MXFP4", "IQ4_XS", "Q3_K", "BF16", "IQ4_KS", "IQ1_S_R4")] == \
        [8.5, 6.5625, 4.25, 4.25, 3.4375, 16.0, 4.25, 1.5]
    assert (recipe("Q4_K_M").default, recipe("IQ2_M").default, recipe("i1-IQ4_XS").imatrix) == ("Q4_K", "IQ2_S", True)
    assert recipe("Q5_K").pure and recipe("IQ4_KS").ik
    ud = gguf_quant("UD-Q4_K_XL")
    assert ud.kind == "unsloth" and not ud.derivable and ud.recipe.ftype == "Q4_K_M"
    assert gguf_quant("UD-Q8_K_XL").recipe.ftype == "Q8_0" and gguf_quant("MXFP4").kind == "checkpoint"
    with pytest.raises(ValueError, match="Q4_K_M"):
        recipe("Q9_Z")
    assert kv_bytes("f16") == 2 and kv_bytes("q8_0") == 34 / 32


def test_quant_option_sets_the_bytes():
    g = read_hf_config(example("qwen3-30b-a3b.json"), quant="Q8_0")
    assert g.quant == "Q8_0" and g.expert_bytes == 3 * 2048 * 768 * 34 / 32
    # every matrix Q8_0, the norms and the router F32 (llama.cpp does not quantize them)
    assert g.weights_bytes == sum(t.bytes for t in g.tensors)
    assert g.weights_bytes == pytest.approx(g.total_params * 8.5 / 8, rel=0.005)
    assert {t.qtype for t in g.tensors if t.name.endswith("ffn_gate_inp.weight") or "norm" in t.name} == {"F32"}
    k = read_hf_config(example("qwen3-30b-a3b.json"), kv_type="q8_0")
    assert k.kv_bytes_per_token == 48 * 2 * 4 * 128 * 34 / 32
    with pytest.raises(ScenarioError, match="--quant"):
        read_hf_config(example("qwen3-30b-a3b.json"), quant="Q9")


def test_scenario_sections_validate_against_the_schema():
    moe = moe_fields(read_hf_config(example("qwen3-30b-a3b.json"), quant="Q4_K_M"))
    assert set(moe) == {"weights_gib", "moe"}
    assert set(moe["moe"]) == {"layers", "experts_per_layer", "top_k", "expert_mib", "dense_gib", "kv_kib_per_token"}
    # Q4_K_M: gate and up Q4_K (4.5 bits); ffn_down Q6_K (6.5625 bits) in the 24 of 48 layers use_more_bits picks
    down = (24 * 6.5625 + 24 * 4.5) / 48
    assert moe["moe"]["expert_mib"] == pytest.approx(2048 * 768 * (4.5 + 4.5 + down) / 8 / 2**20, rel=1e-5)
    ModelSpec(**moe)
    dense = dense_fields(read_hf_config(example("llama-3.1-8b.json")))
    assert set(dense["dense"]) == {"params_b", "layers", "hidden", "kv_kib_per_token"}
    assert dense["dense"]["kv_kib_per_token"] == 128
    ModelSpec(**dense)
    assert model_fields(read_hf_config(example("llama-3.1-8b.json"))) == dense


def one_line(exc: ScenarioError) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


def test_config_errors_are_one_line_naming_file_and_key(tmp_path):
    with pytest.raises(ScenarioError) as e:
        read_model_file(str(tmp_path / "missing.json"))
    assert "missing.json" in one_line(e.value) and "file not found" in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama",')
    with pytest.raises(ScenarioError) as e:
        read_hf_config(str(bad))
    assert "not valid JSON" in one_line(e.value) and "line 1" in str(e.value)
    cfg = json.load(open(example("llama-3.1-8b.json")))
    del cfg["num_hidden_layers"]
    with pytest.raises(ScenarioError) as e:
        read_hf_config(write_config(tmp_path, cfg))
    assert e.value.path == "num_hidden_layers" and "missing" in one_line(e.value)
    cfg = json.load(open(example("llama-3.1-8b.json"))) | {"hidden_size": "4096"}
    with pytest.raises(ScenarioError) as e:
        read_hf_config(write_config(tmp_path, cfg))
    assert e.value.path == "hidden_size" and "whole number" in one_line(e.value)
    cfg = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544}
    with pytest.raises(ScenarioError) as e:
        read_hf_config(write_config(tmp_path, cfg))
    text = one_line(e.value)
    assert e.value.path == "model_type" and "'falcon'" in text and "FalconForCausalLM" in text
    assert "qwen3_moe" in text and "deepseek_v3" in text and "gpt_oss" in text and "glm4_moe" in text
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ScenarioError, match="JSON object"):
        read_hf_config(str(tmp_path / "list.json"))


# --- GGUF: a tiny file written here, read back --------------------------------------------------------------------

H, HEADS, KV_HEADS, HEAD_DIM, FF, E, K, V, DENSE_FF = 64, 4, 2, 16, 32, 8, 2, 96, 128


def write_gguf(path, layers: int = 3, leading_dense: int = 1, nextn: int = 0, split: int = 0) -> dict:
    """A small qwen3moe-like GGUF: F16 attention, F32 norms, Q8_0 experts (gate, up, down), F16 shared expert and
    router; ``leading_dense`` blocks with a dense FFN; ``nextn`` extra MTP blocks; ``split``: at most that many
    tensors per shard (0: one file). Returns what was written."""
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "qwen3moe", split_max_tensors=split)
    w.add_block_count(layers + nextn)
    w.add_embedding_length(H)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_expert_shared_count(1)
    w.add_leading_dense_block_count(leading_dense)
    if nextn:
        w.add_nextn_predict_layers(nextn)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    written = {"expert_elems": 0, "expert_bytes": 0, "dense_elems": 0, "dense_bytes": 0}

    def dense(name, shape, dtype=np.float16):
        a = rng.standard_normal(shape).astype(dtype)
        w.add_tensor(name, a)
        written["dense_elems"] += a.size
        written["dense_bytes"] += a.nbytes

    dense("token_embd.weight", (V, H))
    dense("output.weight", (V, H))
    dense("output_norm.weight", (H,), np.float32)
    for b in range(layers + nextn):
        before = dict(written)
        dense(f"blk.{b}.attn_norm.weight", (H,), np.float32)
        dense(f"blk.{b}.attn_q.weight", (HEADS * HEAD_DIM, H))
        dense(f"blk.{b}.attn_k.weight", (KV_HEADS * HEAD_DIM, H))
        dense(f"blk.{b}.attn_v.weight", (KV_HEADS * HEAD_DIM, H))
        dense(f"blk.{b}.attn_output.weight", (H, HEADS * HEAD_DIM))
        if b < leading_dense:
            dense(f"blk.{b}.ffn_gate.weight", (DENSE_FF, H))
            dense(f"blk.{b}.ffn_up.weight", (DENSE_FF, H))
            dense(f"blk.{b}.ffn_down.weight", (H, DENSE_FF))
        else:
            dense(f"blk.{b}.ffn_gate_inp.weight", (E, H), np.float32)
            dense(f"blk.{b}.ffn_gate_shexp.weight", (FF, H))
            for part, shape in (("gate", (E, FF, H)), ("up", (E, FF, H)), ("down", (E, H, FF))):
                q = quantize(rng.standard_normal(shape).astype(np.float32), T.Q8_0)
                w.add_tensor(f"blk.{b}.ffn_{part}_exps.weight", q, raw_dtype=T.Q8_0)
                written["expert_elems"] += int(np.prod(shape))
                written["expert_bytes"] += q.nbytes
        if b >= layers:  # an MTP block: not part of the model
            written = before
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


def test_gguf_geometry_and_bytes_are_what_was_written(tmp_path):
    path = tmp_path / "tiny.gguf"
    w = write_gguf(path, layers=3, leading_dense=1)
    g = read_model_file(str(path))
    assert (g.architecture, g.layers, g.moe_layers, g.experts_per_layer, g.top_k, g.shared_experts) == \
        ("qwen3moe", 3, 2, E, K, 1)
    assert (g.hidden, g.heads, g.kv_heads, g.head_dim, g.vocab) == (H, HEADS, KV_HEADS, HEAD_DIM, V)
    assert g.expert_params == 3 * H * FF and w["expert_elems"] == 2 * E * 3 * H * FF
    assert g.expert_bytes == w["expert_bytes"] / (2 * E) == 3 * H * FF * 34 / 32  # Q8_0: 34 bytes per 32
    assert g.bits_per_weight_experts == 8.5
    assert g.dense_params == w["dense_elems"] and g.dense_bytes == w["dense_bytes"]
    assert g.total_params == w["dense_elems"] + w["expert_elems"]
    assert g.weights_bytes == w["dense_bytes"] + w["expert_bytes"]
    assert g.active_params_per_token == w["dense_elems"] + K * 3 * H * FF * 2
    assert g.kv_bytes_per_token == 3 * 2 * KV_HEADS * HEAD_DIM * 2
    assert g.quant == "Q8_0"
    fields = moe_fields(g)
    assert fields["moe"]["layers"] == 2 and fields["moe"]["expert_mib"] == pytest.approx(g.expert_bytes / 2**20)
    ModelSpec(**fields)


def write_dense_gguf(path, arch: str, layers: int, window: int = 0) -> int:
    """A dense GGUF of F16 attention and FFN tensors; returns its parameters."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_embedding_length(H)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    if window:
        w.add_sliding_window(window)
    shapes = [("token_embd.weight", (V, H))] + [
        (f"blk.{b}.{n}.weight", s) for b in range(layers) for n, s in
        (("attn_q", (H, H)), ("attn_k", (KV_HEADS * H // HEADS, H)), ("attn_v", (KV_HEADS * H // HEADS, H)),
         ("ffn_up", (DENSE_FF, H)), ("ffn_down", (H, DENSE_FF)))]
    for name, shape in shapes:
        w.add_tensor(name, np.zeros(shape, np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sum(int(np.prod(s)) for _, s in shapes)


def test_gguf_dense_model_and_sliding_layers(tmp_path):
    params = write_dense_gguf(tmp_path / "d.gguf", "llama", 2)
    g = read_gguf(str(tmp_path / "d.gguf"))
    assert not g.is_moe and g.total_params == g.dense_params == g.active_params_per_token == params
    assert g.weights_bytes == 2 * params and g.bits_per_weight_dense == 16 and g.quant == "F16"
    assert g.head_dim == H // HEADS and g.kv_bytes_per_token == 2 * 2 * KV_HEADS * (H // HEADS) * 2
    ModelSpec(**dense_fields(g))
    with pytest.raises(ValueError, match="dense"):
        moe_fields(g)
    write_dense_gguf(tmp_path / "oss.gguf", "gpt-oss", 4, window=128)  # llama.cpp: even layers slide
    o = read_gguf(str(tmp_path / "oss.gguf"))
    assert o.attention_layers == 2 and o.kv_bytes_per_token == 2 * 2 * KV_HEADS * (H // HEADS) * 2
    assert any("sliding-window" in n for n in o.notes)


def test_gguf_mtp_blocks_are_left_out(tmp_path):
    plain, mtp = tmp_path / "plain.gguf", tmp_path / "mtp.gguf"
    write_gguf(plain, layers=3)
    write_gguf(mtp, layers=3, nextn=1)
    a, b = read_gguf(str(plain)), read_gguf(str(mtp))
    assert (b.layers, b.moe_layers, b.total_params, b.weights_bytes) == (a.layers, a.moe_layers, a.total_params,
                                                                          a.weights_bytes)
    assert any("multi-token" in n for n in b.notes)


def test_gguf_split_file_is_read_whole(tmp_path):
    single = tmp_path / "one.gguf"
    write_gguf(single)
    write_gguf(tmp_path / "split.gguf", split=10)
    shards = sorted(p for p in os.listdir(tmp_path) if p.startswith("split-"))
    assert len(shards) > 2
    whole, parts = read_gguf(str(single)), read_gguf(str(tmp_path / shards[0]))
    assert (parts.total_params, parts.weights_bytes, parts.moe_layers) == (whole.total_params, whole.weights_bytes,
                                                                           whole.moe_layers)
    with pytest.raises(ScenarioError, match="give the first"):
        read_gguf(str(tmp_path / shards[1]))
    os.remove(tmp_path / shards[-1])
    with pytest.raises(ScenarioError, match="file not found"):
        read_gguf(str(tmp_path / shards[0]))


def test_gguf_header_reader_agrees_with_gguf_and_skips_the_vocabulary(tmp_path):
    """The faster reader (string arrays skipped, numeric arrays in one piece) reads what GGUFReader reads."""
    import time

    import gguf

    from sim.formats.gguf import header_reader

    path = tmp_path / "vocab.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(H)
    w.add_head_count(HEADS)
    w.add_head_count_kv([KV_HEADS, 0])
    w.add_token_list([f"token{i}" for i in range(5_000)])
    w.add_token_scores([0.25] * 5_000)
    w.add_tensor("token_embd.weight", np.zeros((V, H), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    start = time.perf_counter()
    fast = header_reader()(str(path))
    assert time.perf_counter() - start < 1.0
    plain = gguf.GGUFReader(str(path))
    assert list(fast.fields) == list(plain.fields)
    for name, field in fast.fields.items():
        assert field.types == plain.fields[name].types
        if name != "tokenizer.ggml.tokens":
            assert field.contents() == plain.fields[name].contents(), name
    assert fast.fields["tokenizer.ggml.tokens"].contents() == []
    assert [(t.name, t.n_bytes, t.data_offset) for t in fast.tensors] == \
        [(t.name, t.n_bytes, t.data_offset) for t in plain.tensors]
    g = read_gguf(str(path))
    assert g.attention_layers == 1 and any("without KV heads" in n for n in g.notes)
    cut = tmp_path / "cut_vocab.gguf"
    cut.write_bytes(path.read_bytes()[:2000])  # inside the token list
    with pytest.raises(ScenarioError, match="not a GGUF file"):
        read_gguf(str(cut))


def test_not_a_gguf_is_one_error(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 this is a zip, not a model" * 10)
    with pytest.raises(ScenarioError) as e:
        read_model_file(str(fake))
    assert "not a GGUF file" in one_line(e.value) and str(fake) in str(e.value)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ScenarioError, match="not a GGUF file"):
        read_gguf(str(empty))
    good = tmp_path / "good.gguf"
    write_gguf(good)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:40])
    with pytest.raises(ScenarioError, match="not a GGUF file"):
        read_gguf(str(cut))
    with pytest.raises(ScenarioError, match="--quant"):
        read_model_file(str(good), quant="Q4_K_M")


def test_gguf_missing_key_names_it(tmp_path):
    import gguf

    path = tmp_path / "nokey.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_embedding_length(H)
    w.add_tensor("token_embd.weight", np.zeros((V, H), np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ScenarioError) as e:
        read_gguf(str(path))
    assert e.value.path == "llama.block_count" and "missing" in one_line(e.value)


# --- sim model ------------------------------------------------------------------------------------------------------

def test_sim_model_prints_geometry_and_scenario_entry(tmp_path):
    r = CliRunner().invoke(main, ["model", example("qwen3-30b-a3b.json"), "--quant", "Q4_K_M"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "30.53 B total, 3.35 B active" in r.stdout and "KV cache" in r.stdout
    from sim.config.yaml_io import parse_yaml

    entry = parse_yaml(r.stdout.split("scenario entry:\n", 1)[1])
    assert list(entry["models"]) == ["qwen3-30b-a3b"]
    ModelSpec(**entry["models"]["qwen3-30b-a3b"])
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    r = CliRunner().invoke(main, ["model", str(path), "--json", "--name", "tiny"], catch_exceptions=False)
    out = json.loads(r.stdout)
    assert out["geometry"]["moe_layers"] == 2 and out["models"]["tiny"]["moe"]["top_k"] == K


def test_sim_model_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for args in (["model", str(bad)], ["model", example("llama-3.1-8b.json"), "--quant", "Q9"],
                 ["model", str(tmp_path / "none.gguf")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, r.output
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("sim: error: ")
