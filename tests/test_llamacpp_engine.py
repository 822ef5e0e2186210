"""The llama.cpp engine: placement by its flags, VRAM accounting, step and prompt costs, the shapes users know."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.llamacpp import LlamaCpp
from sim.core.errors import ScenarioError, SimulationError
from sim.llamacpp.bench import bench_setup, run_bench
from sim.llamacpp.machine import MachineSpec, build_scenario, scenario_dict
from sim.llamacpp.memory import KV_TYPE_BYTES
from sim.llamacpp.params import DEFAULTS, CostParams
from sim.llamacpp.placement import CPU, model_tensors, parse_rules, place
from sim.modelfiles import read_model_file

QWEN = "calibration/models/qwen3-30b-a3b.json"
OSS = "calibration/models/gpt-oss-20b.json"


def machine(settings=None, gpu="rtx3070ti", host="ryzen5_5600x", os_name="linux", model=QWEN, quant="Q4_K_M",
            file_gib=17.28, gpus=1, slot_gen=4, host_fields=None):
    spec = MachineSpec(gpu, host, gpus=gpus, slot_gen=slot_gen, os=os_name, host_fields=host_fields or {})
    return build_scenario(scenario_dict(spec, model, quant, settings or {}, file_gib), "test")


def rates(scn, settings: dict, n_prompt=128, n_gen=32, depth=0):
    lc = scn.machines["box"].engine.llamacpp.model_copy(update=settings)
    rows = run_bench(scn, "box", lc, n_prompt=[n_prompt], n_gen=[n_gen], n_depth=[depth])
    return {("pp" if r.n_prompt else "tg"): (r.tok_s if not r.error else float("nan")) for r in rows}


@pytest.fixture(scope="module")
def qwen_tensors():
    return model_tensors(read_model_file(QWEN, "Q4_K_M"), 17.28 * 2**30)


def test_tensors_add_up_to_the_file(qwen_tensors):
    assert sum(t.bytes for t in qwen_tensors.tensors) == pytest.approx(17.28 * 2**30, rel=1e-9)
    names = {t.name for t in qwen_tensors.tensors}
    assert {"token_embd.weight", "output.weight", "blk.0.ffn_up_exps.weight", "blk.47.attn_q.weight"} <= names


def test_ngl_counts_the_output_head_as_the_last_layer(qwen_tensors):
    """llama.cpp: i_gpu_start = n_layer + 1 - n_gpu_layers; the token embedding stays on the CPU."""
    gpus = ("CUDA0",)
    p = place(qwen_tensors, n_gpu_layers=0, gpus=gpus, split=[1.0], rules=[])
    assert set(p.devices) == {CPU}
    p = place(qwen_tensors, n_gpu_layers=49, gpus=gpus, split=[1.0], rules=[])
    assert p.output_device == "CUDA0" and all(d == "CUDA0" for d in p.block_device)
    assert p.devices[0] == CPU  # token_embd
    p = place(qwen_tensors, n_gpu_layers=48, gpus=gpus, split=[1.0], rules=[])
    assert p.block_device[0] == CPU and p.block_device[1] == "CUDA0" and p.output_device == "CUDA0"
    p = place(qwen_tensors, n_gpu_layers=1, gpus=gpus, split=[1.0], rules=[])
    assert set(p.block_device) == {CPU} and p.output_device == "CUDA0"


def test_n_cpu_moe_keeps_the_first_layers_experts_on_the_cpu(qwen_tensors):
    p = place(qwen_tensors, n_gpu_layers=99, gpus=("CUDA0",), split=[1.0], rules=[], n_cpu_moe=10)
    assert p.cpu_expert_blocks() == 10
    for t, d in zip(qwen_tensors.tensors, p.devices, strict=True):
        if t.role == "experts":
            assert (d == CPU) == (t.block < 10), t.name
        elif t.role != "embedding":
            assert d == "CUDA0", t.name
    assert place(qwen_tensors, n_gpu_layers=99, gpus=("CUDA0",), split=[1.0], rules=[],
                 cpu_moe=True).cpu_expert_blocks() == 48


def test_override_rules_first_match_wins_and_search_not_match(qwen_tensors):
    rules = parse_rules([r"blk\.(1[0-9])\.ffn_.*_exps=CUDA0", r"exps=CPU"], "t", "ot", ("CUDA0",))
    p = place(qwen_tensors, n_gpu_layers=99, gpus=("CUDA0",), split=[1.0], rules=rules)
    on_gpu = {t.block for t, d in zip(qwen_tensors.tensors, p.devices, strict=True) if t.role == "experts"
              and d == "CUDA0"}
    assert on_gpu == set(range(10, 20))
    with pytest.raises(ScenarioError, match="expected CPU or one of the machine's cards"):
        parse_rules(["exps=CUDA3"], "t", "ot", ("CUDA0",))
    with pytest.raises(ScenarioError, match="REGEX=BUFFER"):
        parse_rules(["exps"], "t", "ot", ("CUDA0",))
    with pytest.raises(ScenarioError, match="not a regular expression"):
        parse_rules(["blk\\.(=CPU"], "t", "ot", ("CUDA0",))


def test_tensor_split_gives_contiguous_runs_in_proportion(qwen_tensors):
    p = place(qwen_tensors, n_gpu_layers=99, gpus=("CUDA0", "CUDA1"), split=[3.0, 1.0], rules=[])
    devices = list(p.block_device)
    first_cuda1 = devices.index("CUDA1")
    assert set(devices[:first_cuda1]) == {"CUDA0"} and set(devices[first_cuda1:]) == {"CUDA1"}
    assert 34 <= first_cuda1 <= 38  # three quarters of 49 layers (the output head counts)


def test_kv_cache_follows_ctx_and_cache_type():
    scn = machine({"n_gpu_layers": 99, "n_cpu_moe": 48})
    lc = scn.machines["box"].engine.llamacpp
    g = read_model_file(QWEN, "Q4_K_M")
    for kv in ("f16", "q8_0", "q4_0"):
        s = bench_setup(scn, "box", lc.model_copy(update={"cache_type_k": kv, "cache_type_v": kv}), 4096)
        cuda = s.memory[1]
        assert cuda.kv == pytest.approx(4096 * g.kv_bytes_per_token / 2 * KV_TYPE_BYTES[kv], rel=1e-9)


def test_out_of_vram_is_llama_cpps_error_on_linux_and_shared_memory_on_windows():
    settings = {"n_gpu_layers": 99, "n_cpu_moe": 0}
    linux = machine(settings)
    with pytest.raises(SimulationError, match=r"CUDA0: .* of .* GiB free.*cudaMalloc failed: out of memory"):
        bench_setup(linux, "box", linux.machines["box"].engine.llamacpp, 640)
    row = run_bench(linux, "box", n_prompt=[512], n_gen=[0], n_depth=[0])[0]
    assert "out of memory" in row.error and math.isnan(row.tok_s)
    windows = machine(settings, os_name="windows")
    s = bench_setup(windows, "box", windows.machines["box"].engine.llamacpp, 640)
    assert s.memory[1].spill_share > 0.3 and s.notes


def test_decode_rises_with_expert_layers_on_the_gpu_then_falls_off_a_cliff():
    """The shape of every --n-cpu-moe sweep: each expert layer moved to the card speeds decode up until VRAM runs
    out; then the weights spill to shared memory (Windows) and decode falls."""
    scn = machine({"n_gpu_layers": 99}, os_name="windows")
    tg = {n: rates(scn, {"n_cpu_moe": n})["tg"] for n in range(20, 49, 2)}
    fits = [n for n in tg if bench_setup(scn, "box", scn.machines["box"].engine.llamacpp.model_copy(
        update={"n_cpu_moe": n}), 160).memory[1].excess == 0]
    edge = min(fits)
    assert 26 <= edge <= 36  # 8 GB: about 17 of 48 expert layers fit beside the rest
    above = [tg[n] for n in sorted(fits, reverse=True)]
    assert all(a < b for a, b in zip(above, above[1:], strict=False))  # rising while it fits
    assert tg[edge - 8] < 0.8 * max(tg.values())  # the cliff: eight expert layers more in shared memory


def test_prefill_depends_on_ubatch_and_on_the_link():
    scn = machine({"n_gpu_layers": 99, "n_cpu_moe": 40})
    pp = {ub: rates(scn, {"ubatch_size": ub, "batch_size": 4096}, n_prompt=4096)["pp"] for ub in (128, 512, 2048)}
    assert pp[128] < pp[512] < pp[2048]  # each ubatch copies the CPU's experts again
    gen3 = machine({"n_gpu_layers": 99, "n_cpu_moe": 40}, slot_gen=3)
    assert rates(gen3, {}, n_prompt=2048)["pp"] < 0.75 * rates(scn, {}, n_prompt=2048)["pp"]
    small = rates(scn, {"offload_min_batch": 4096}, n_prompt=512)["pp"]  # below the offload threshold: the CPU
    assert small < rates(scn, {}, n_prompt=512)["pp"]


def test_layer_split_loses_to_expert_offload_at_the_same_vram():
    """-ngl moves whole layers (attention and KV too) to the CPU; --n-cpu-moe only the experts, the part a token
    reads least of: at about the same VRAM it decodes faster."""
    scn = machine({})
    lc = scn.machines["box"].engine.llamacpp
    split = lc.model_copy(update={"n_gpu_layers": 18, "n_cpu_moe": 0})
    vram_split = bench_setup(scn, "box", split, 160).vram_gib()
    best = None
    for n in range(48, 0, -1):
        s = bench_setup(scn, "box", lc.model_copy(update={"n_gpu_layers": 99, "n_cpu_moe": n}), 160)
        if s.vram_gib() > vram_split:
            break
        best = n
    assert best is not None
    tg_split = rates(scn, {"n_gpu_layers": 18, "n_cpu_moe": 0})["tg"]
    tg_moe = rates(scn, {"n_gpu_layers": 99, "n_cpu_moe": best})["tg"]
    assert tg_moe > 1.1 * tg_split


@settings(max_examples=12, deadline=None)
@given(mt=st.integers(2133, 6400), extra=st.integers(100, 1600), ncmoe=st.integers(0, 48))
def test_more_dram_bandwidth_is_never_slower(mt, extra, ncmoe):
    slow = machine({"n_gpu_layers": 99, "n_cpu_moe": ncmoe}, os_name="windows", host_fields={"mt_s": mt})
    fast = machine({"n_gpu_layers": 99, "n_cpu_moe": ncmoe}, os_name="windows", host_fields={"mt_s": mt + extra})
    a, b = rates(slow, {}), rates(fast, {})
    assert b["tg"] >= a["tg"] * (1 - 1e-12) and b["pp"] >= a["pp"] * (1 - 1e-12)


@settings(max_examples=10, deadline=None)
@given(reserved=st.floats(0.0, 3.0), more=st.floats(0.1, 3.0), ncmoe=st.integers(20, 40))
def test_more_free_vram_is_never_slower(reserved, more, ncmoe):
    """Another tenant's VRAM can only push weights into shared memory: giving it back never slows a step."""
    def tg(res):
        spec = MachineSpec("rtx3070ti", "ryzen5_5600x", slot_gen=4, os="windows", reserved_gib=res)
        scn = build_scenario(scenario_dict(spec, QWEN, "Q4_K_M", {"n_gpu_layers": 99, "n_cpu_moe": ncmoe}, 17.28),
                             "t")
        return rates(scn, {})["tg"]

    assert tg(reserved) >= tg(reserved + more) * (1 - 1e-12)


def test_decode_slows_with_context_depth_and_a_batch_reads_more_experts():
    scn = machine({"n_gpu_layers": 99, "n_cpu_moe": 36})
    assert rates(scn, {}, depth=8192)["tg"] < rates(scn, {})["tg"]
    s = bench_setup(scn, "box", scn.machines["box"].engine.llamacpp, 512)
    one, four = s.engine.decode_step(1, 0).total_s, s.engine.decode_step(4, 0).total_s
    assert one < four < 4 * one  # a batch shares the weights' reads


def test_bench_run_json_reports_llama_bench_pp_and_tg(tmp_path):
    from click.testing import CliRunner

    from sim.cli import main

    result = CliRunner().invoke(main, ["run", "scenarios/llamacpp_3070ti.yaml", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    m = doc["metrics"]
    assert m["prefill_tok_s"] == m["bench.pp512.tok_s"] and m["decode_tok_s"] == m["bench.tg128.tok_s"]
    assert m["bench.tg128_d4096.tok_s"] < m["decode_tok_s"]
    again = CliRunner().invoke(main, ["run", "scenarios/llamacpp_3070ti.yaml", "--json"])
    assert again.output == result.output  # deterministic
    text = CliRunner().invoke(main, ["run", "scenarios/llamacpp_3070ti.yaml"]).output
    assert re.search(r"\| qwen3_30b .* \|\s+tg128 \|", text) and "routed experts of 31 of 48" in text


def test_serving_requests_on_llamacpp_little_law():
    raw = scenario_dict(MachineSpec("rtx4090", "ryzen9_7950x", slot_gen=4), QWEN, "Q4_K_M",
                        {"n_gpu_layers": 99, "n_cpu_moe": 12, "parallel": 2}, 17.28)
    raw["serve"] = {"machine": "box", "requests": 40, "prompt_tokens": 512, "output_tokens_min": 64,
                    "output_tokens_max": 256, "workload": {"kind": "closed", "clients": 4}}
    from sim.runner import run

    scn = build_scenario(raw, "t")
    m = run(scn, 3).metrics
    assert m["requests_completed"] == 40 and m["decode_tok_s"] > 0 and m["prefill_tok_s"] > m["decode_tok_s"]
    assert m["requests_in_engine_mean"] == pytest.approx(m["little_lambda_w"], rel=0.02)
    assert m["vram_used_gib"] > 0 and m["cpu_expert_layers"] == 12


def test_defaults_equal_the_shipped_fit():
    from sim.config.yaml_io import read_yaml
    from sim.llamacpp.params import BAND, BAND_NEAR, BAND_WITHIN

    doc = read_yaml("calibration/llamacpp.yaml")
    assert set(doc["parameters"]) == set(DEFAULTS)
    for key, value in DEFAULTS.items():
        assert doc["parameters"][key]["value"] == pytest.approx(value, rel=1e-5), key
    bands = read_yaml("calibration/llamacpp_bands.yaml")
    for test in ("tg", "pp"):
        assert tuple(bands["band"][test]) == pytest.approx(BAND[test], rel=1e-3)
        assert tuple(bands["band_within"][test]) == pytest.approx(BAND_WITHIN[test], rel=1e-3)
        assert [tuple(row) for row in bands["band_near"][test]] == [pytest.approx(r, rel=1e-3) for r in BAND_NEAR[test]]
    # a scenario's value for its own backend wins; a backend the fit has no value for takes the pooled one
    p = CostParams.of({"gpu_memory_efficiency": 0.5}, backend="cuda")
    assert p.get("gpu_memory_efficiency", "cuda") == 0.5
    assert CostParams.of().get("split_s") == DEFAULTS["split_s"]
    assert CostParams.of().get("node_s", "no_such_backend") == DEFAULTS["node_s"]


def test_settings_validate_like_the_flags():
    with pytest.raises(Exception, match="cache_type_k"):
        LlamaCpp(cache_type_k="q3_x")
    assert LlamaCpp(flash_attn=True).flash_attn is True and LlamaCpp().flash_attn == "auto"


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v3", "qwen3-235b-a22b", "llama-3.1-8b"])
def test_geometry_roles_add_up_to_the_dense_bytes(name):
    import json as _json

    g = read_model_file(f"calibration/models/{name}.json", "Q4_K_M")
    tied = _json.load(open(f"calibration/models/{name}.json")).get("tie_word_embeddings", False)
    roles = g.embedding_bytes + (0 if tied else g.output_bytes) + g.attention_bytes + g.ffn_bytes
    assert roles == pytest.approx(g.dense_bytes, rel=1e-9)


def test_run_out_writes_the_bench_table(tmp_path):
    from click.testing import CliRunner

    from sim.cli import main

    assert CliRunner().invoke(main, ["run", "scenarios/llamacpp_3070ti.yaml", "--out", str(tmp_path)]).exit_code == 0
    import pandas as pd

    frame = pd.read_csv(tmp_path / "bench.csv")
    assert list(frame.test) == ["pp512", "pp512 @ d4096", "tg128", "tg128 @ d4096"]
    assert (frame.tok_s > 0).all() and (frame.vram_gib > 0).all()


def test_a_gguf_with_tied_embeddings_reads_them_as_its_output_head(tmp_path):
    """No output.weight: llama.cpp copies the token embedding to the output head's device and reads it each step."""
    from test_modelfiles import write_dense_gguf

    from sim.modelfiles.gguf_file import read_gguf

    write_dense_gguf(tmp_path / "tied.gguf", "llama", 2)
    g = read_gguf(str(tmp_path / "tied.gguf"))
    assert g.embedding_bytes > 0 and g.output_bytes >= g.embedding_bytes


def test_a_swept_llama_bench_value_is_validated_like_a_scenario():
    from click.testing import CliRunner

    from sim.cli import main

    r = CliRunner().invoke(main, ["llama", "llama-bench -m x.gguf -ncmoe 31 -ub 0,512", "--model", QWEN, "--quant",
                                  "Q4_K_M", "--gpu", "rtx3070ti", "--host", "ryzen5_5600x"])
    assert r.exit_code == 2 and "ubatch_size" in r.output and "Traceback" not in r.output
