"""sim vllm: a pasted vLLM / SGLang server command line read (sim.serving.cmdline), its defaults by engine version
(sim.serving.engine_defaults), the dense-engine scenario built from it (sim.vllm_scenario) and the command."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.core.errors import ScenarioError, SimulationError
from sim.serving.cmdline import parse_command
from sim.serving.engine_defaults import CHANGES, CURRENT, Gpu, resolve, table_rows, version_tuple
from sim.vllm_scenario import Workload, build

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
A100 = Gpu(80, "NVIDIA A100 80GB SXM")
H100 = Gpu(80, "NVIDIA H100 SXM")
RTX4090 = Gpu(24, "NVIDIA GeForce RTX 4090")
B200 = Gpu(180, "NVIDIA B200")

VLLM_FLAGS = [  # flag, value as written, settings key, value read
    ("--max-num-seqs", "64", "max_num_seqs", 64),
    ("--max-num-batched-tokens", "8192", "max_num_batched_tokens", 8192),
    ("--max-num-batched-tokens", "8k", "max_num_batched_tokens", 8000),
    ("--max-num-batched-tokens", "2K", "max_num_batched_tokens", 2048),
    ("--gpu-memory-utilization", "0.85", "gpu_memory_utilization", 0.85),
    ("--tensor-parallel-size", "2", "tensor_parallel", 2),
    ("-tp", "4", "tensor_parallel", 4),
    ("--kv-cache-dtype", "fp8", "kv_cache_dtype", "fp8"),
    ("--kv-cache-dtype", "fp8_e5m2", "kv_cache_dtype", "fp8_e5m2"),
    ("--max-model-len", "16384", "max_model_len", 16384),
    ("--max-model-len", "auto", "max_model_len", None),
    ("--block-size", "32", "block_size", 32),
    ("--num-gpu-blocks-override", "1000", "num_gpu_blocks_override", 1000),
    ("--dtype", "half", "dtype", "half"),
    ("--dtype", "bfloat16", "dtype", "bfloat16"),
    ("--quantization", "awq", "quantization", "awq"),
    ("-q", "fp8", "quantization", "fp8"),
    ("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}', "speculative",
     {"method": "ngram", "num_speculative_tokens": 3}),
    ("--swap-space", "8", "swap_space_gib", 8.0),
    ("--preemption-mode", "swap", "preemption_mode", "swap"),
    ("--cpu-offload-gb", "4", "cpu_offload_gib", 4.0),
    ("--pipeline-parallel-size", "2", "pipeline_parallel", 2),
    ("--scheduling-policy", "priority", "scheduling_policy", "priority"),
]
SGLANG_FLAGS = [
    ("--tp-size", "2", "tensor_parallel", 2),
    ("--tp", "2", "tensor_parallel", 2),
    ("--mem-fraction-static", "0.8", "mem_fraction_static", 0.8),
    ("--max-running-requests", "128", "max_num_seqs", 128),
    ("--chunked-prefill-size", "4096", "chunked_prefill_size", 4096),
    ("--chunked-prefill-size", "-1", "chunked_prefill_size", -1),
    ("--max-prefill-tokens", "16384", "max_prefill_tokens", 16384),
    ("--kv-cache-dtype", "fp8_e4m3", "kv_cache_dtype", "fp8_e4m3"),
    ("--context-length", "8192", "max_model_len", 8192),
    ("--schedule-policy", "lpm", "scheduling_policy", "lpm"),
    ("--speculative-algorithm", "EAGLE", "speculative", {"method": "EAGLE"}),
    ("--speculative-num-steps", "3", "speculative", {"num_steps": 3}),
    ("--speculative-num-draft-tokens", "4", "speculative", {"num_speculative_tokens": 4}),
    ("--page-size", "16", "block_size", 16),
    ("--cuda-graph-max-bs", "64", "cuda_graph_max_bs", 64),
    ("--max-total-tokens", "100000", "max_total_tokens", 100000),
    ("--dtype", "float16", "dtype", "float16"),
]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("flag,text,key,value", VLLM_FLAGS)
@pytest.mark.parametrize("eq", [False, True])
def test_vllm_flags_in_both_syntaxes(flag, text, key, value, eq):
    words = f"{flag}={shlex.quote(text)}" if eq else f"{flag} {shlex.quote(text)}"
    cmd = parse_command(f"vllm serve {LLAMA} {words}")
    assert cmd.engine == "vllm" and cmd.model == LLAMA
    assert cmd.settings[key] == value and cmd.flags[key] == flag
    assert not cmd.unknown and not cmd.ignored


@pytest.mark.parametrize("flag,text,key,value", SGLANG_FLAGS)
@pytest.mark.parametrize("eq", [False, True])
def test_sglang_flags_in_both_syntaxes(flag, text, key, value, eq):
    words = f"{flag}={text}" if eq else f"{flag} {text}"
    cmd = parse_command(f"python -m sglang.launch_server --model-path {LLAMA} {words}")
    assert cmd.engine == "sglang" and cmd.model == LLAMA
    got = cmd.settings[key]
    assert (all(got[k] == v for k, v in value.items()) if isinstance(value, dict) else got == value)


def test_boolean_flags_on_off_and_old_values():
    assert parse_command("vllm serve m --enable-prefix-caching").settings["enable_prefix_caching"] is True
    assert parse_command("vllm serve m --no-enable-prefix-caching").settings["enable_prefix_caching"] is False
    assert parse_command("vllm serve m --no-enable-chunked-prefill").settings["enable_chunked_prefill"] is False
    old = parse_command("vllm serve m --enable-chunked-prefill False --enforce-eager")  # vLLM 0.6's StoreBoolean
    assert old.settings["enable_chunked_prefill"] is False and old.settings["enforce_eager"] is True
    assert parse_command("vllm serve m --enable-chunked-prefill=true").settings["enable_chunked_prefill"] is True
    sg = parse_command("sglang serve --model-path m --disable-radix-cache --disable-cuda-graph --enable-mixed-chunk")
    assert sg.settings["enable_prefix_caching"] is False and sg.settings["enforce_eager"] is True
    assert sg.settings["enable_mixed_chunk"] is True and sg.program == "sglang serve"


def test_programs_quoting_continuations_and_environment():
    cmd = parse_command("CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=0 python3 -m vllm.entrypoints.openai.api_server \\\n"
                        f"  --model {LLAMA} \\\n  --tensor-parallel-size 2 --max_num_seqs 32  # comment")
    assert cmd.program == "python -m vllm.entrypoints.openai.api_server" and cmd.model == LLAMA
    assert cmd.settings == {"tensor_parallel": 2, "max_num_seqs": 32}
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_USE_V1": "0"}
    assert parse_command(f"/opt/venv/bin/vllm serve --port 8000 {LLAMA}").model == LLAMA  # MODEL after a flag
    assert parse_command("$ python -m sglang.launch_server --model m").model == "m"


def test_no_effect_and_unknown_flags_are_listed_never_fatal():
    cmd = parse_command(f"vllm serve {LLAMA} --host 0.0.0.0 --port 8000 --api-key sk-1 --served-model-name x "
                        "--trust-remote-code --chat-template t.jinja --download-dir /d --uvicorn-log-level warning "
                        "--frobnicate 3 --zork --max-num-seqs 8 2>&1 | tee log.txt")
    assert cmd.settings == {"max_num_seqs": 8}
    assert cmd.ignored[:8] == ["--host 0.0.0.0", "--port 8000", "--api-key sk-1", "--served-model-name x",
                               "--trust-remote-code", "--chat-template t.jinja", "--download-dir /d",
                               "--uvicorn-log-level warning"]
    assert "2>&1" in cmd.ignored and cmd.ignored[-1] == "| tee log.txt"
    assert cmd.unknown == ["--frobnicate 3", "--zork"]


@pytest.mark.parametrize("line,flag", [
    ("vllm serve m --max-num-seqs", "--max-num-seqs"),
    ("vllm serve m --max-num-seqs --port 80", "--max-num-seqs"),
    ("vllm serve m --gpu-memory-utilization=", "--gpu-memory-utilization"),
    ("vllm serve m --gpu-memory-utilization 1.2", "--gpu-memory-utilization"),
    ("vllm serve m --max-num-seqs lots", "--max-num-seqs"),
    ("vllm serve m --dtype int7", "--dtype"),
    ("vllm serve m --speculative-config '{oops'", "--speculative-config"),
    ("python -m sglang.launch_server --model-path m --tp", "--tp"),
    ("vllm serve m --enable-prefix-caching=maybe", "--enable-prefix-caching"),
])
def test_a_flag_without_or_with_a_bad_value_is_one_line_naming_it(line, flag):
    with pytest.raises(ScenarioError) as err:
        parse_command(line)
    assert flag in str(err.value) and "\n" not in str(err.value)


def test_not_a_server_line():
    with pytest.raises(ScenarioError, match="expected vllm serve"):
        parse_command("llama-server -m x.gguf")


def _r(engine, version, line_settings=None, gpu=A100, context=131072, env=None):
    settings = line_settings or {}
    return resolve(engine, version, settings, {k: "--" + k for k in settings}, gpu=gpu, context_tokens=context,
                   env=env or {}).values


def test_vllm_defaults_differ_by_version():
    old, new = _r("vllm", "0.6.6.post1"), _r("vllm", "0.34.0")
    assert old["engine_mode"] == "V0" and new["engine_mode"] == "V1"
    assert (old["max_num_seqs"], new["max_num_seqs"]) == (256, 256)  # an A100: the small tier in V1 since 0.9.0
    assert old["enable_prefix_caching"] is False and new["enable_prefix_caching"] is True
    assert old["enable_chunked_prefill"] is True  # V0: on for max_model_len > 32K
    assert _r("vllm", "0.6.6", context=4096)["enable_chunked_prefill"] is False
    assert _r("vllm", "0.6.6", context=4096)["max_num_batched_tokens"] == 4096  # max(max_model_len, 2048)
    assert (old["gpu_memory_utilization"], _r("vllm", "0.20.0")["gpu_memory_utilization"],
            new["gpu_memory_utilization"]) == (0.9, 0.92, None)
    assert (old["block_size"], new["block_size"]) == (16, 64)


def test_vllm_batch_defaults_by_gpu_and_version():
    assert _r("vllm", "0.8.0", gpu=H100)["max_num_batched_tokens"] == 8192  # by name
    assert _r("vllm", "0.8.0", gpu=A100)["max_num_seqs"] == 1024
    assert _r("vllm", "0.8.5", gpu=A100)["max_num_batched_tokens"] == 8192  # 70 GiB or more
    assert _r("vllm", "0.9.0", gpu=A100)["max_num_batched_tokens"] == 2048  # not an A100 (PR 17885)
    assert _r("vllm", "0.9.0", gpu=H100)["max_num_seqs"] == 1024
    assert _r("vllm", "0.27.0", gpu=B200)["max_num_batched_tokens"] == 8192
    assert _r("vllm", "0.28.0", gpu=B200)["max_num_batched_tokens"] == 16384
    gb10 = Gpu(128, "NVIDIA GB10", gb10=True)
    assert _r("vllm", "0.32.0", gpu=gb10)["max_num_batched_tokens"] == 8192
    assert _r("vllm", "0.33.0", gpu=gb10)["max_num_batched_tokens"] == 2048
    assert _r("vllm", "0.34.0", {"max_num_batched_tokens": 128}, gpu=H100)["max_num_seqs"] == 128  # at most it
    off = _r("vllm", "0.34.0", {"enable_chunked_prefill": False}, gpu=H100, context=16384)
    assert off["enable_chunked_prefill"] is False and off["max_num_batched_tokens"] == 16384
    forced = _r("vllm", "0.10.0", {"enable_chunked_prefill": False})
    assert forced["enable_chunked_prefill"] is True  # V1 before 0.12 turns it on whatever the flag says


def test_vllm_engine_choice_v0_fallbacks():
    assert _r("vllm", "0.9.0", env={"VLLM_USE_V1": "0"})["engine_mode"] == "V0"
    assert _r("vllm", "0.7.3", env={"VLLM_USE_V1": "1"})["engine_mode"] == "V1"
    fell = resolve("vllm", "0.9.0", {"preemption_mode": "swap"}, {"preemption_mode": "--preemption-mode"}, gpu=A100,
                   context_tokens=4096)
    assert fell.values["engine_mode"] == "V0" and fell.values["swap_space_gib"] == 4.0
    assert any("falls back to V0" in n for n in fell.notes)
    with pytest.raises(ScenarioError, match="not a flag of vLLM 0.11.0"):
        resolve("vllm", "0.11.0", {"preemption_mode": "swap"}, {}, gpu=A100, context_tokens=4096)


def test_sglang_defaults_differ_by_version():
    assert _r("sglang", "0.3.6", gpu=H100)["mem_fraction_static"] == 0.88
    assert _r("sglang", "0.4.0", {"tensor_parallel": 8}, gpu=H100)["mem_fraction_static"] == 0.81
    assert _r("sglang", "0.4.9", gpu=H100)["mem_fraction_static"] == round((81920 - 10 * 1024) / 81920, 3)
    # 0.5.23 on 80 GiB: 512 + 1.5 x 8192 + 2 x 256 + 128 + 8 x 58 prefill graph sizes = 13,904 MiB kept back
    assert _r("sglang", "0.5.23", gpu=H100)["mem_fraction_static"] == round((81920 - 13904) / 81920, 3)
    assert _r("sglang", "0.5.23", gpu=H100)["chunked_prefill_size"] == 8192
    assert (_r("sglang", "0.5.19", gpu=RTX4090)["chunked_prefill_size"],
            _r("sglang", "0.5.20", gpu=RTX4090)["chunked_prefill_size"]) == (2048, 4096)
    assert (_r("sglang", "0.4.3")["scheduling_policy"], _r("sglang", "0.4.4")["scheduling_policy"]) == ("lpm", "fcfs")
    assert _r("sglang", "0.5.23", {"chunked_prefill_size": -1})["enable_chunked_prefill"] is False


def test_versions_table_and_refusals():
    assert CURRENT == {"vllm": "0.34.0", "sglang": "0.5.23"}
    assert version_tuple("v0.6.6.post1", "vllm") == (0, 6, 6) and version_tuple("0.5.10rc1", "sglang") == (0, 5, 10)
    for keys in CHANGES.values():
        for eras in keys.values():
            assert [e.key for e in eras] == sorted(e.key for e in eras) and all(e.source for e in eras)
    assert len(table_rows()) >= 40
    with pytest.raises(ScenarioError, match="--engine-version"):
        resolve("vllm", "0.5.4", {}, {}, gpu=A100, context_tokens=4096)
    with pytest.raises(ScenarioError, match="--engine-version"):
        resolve("vllm", "latest", {}, {}, gpu=A100, context_tokens=4096)


def test_scenario_dict_of_a_vllm_line():
    cmd = parse_command(f"vllm serve {LLAMA} --max-num-seqs 64 --gpu-memory-utilization 0.85 --kv-cache-dtype fp8 "
                        "--quantization fp8")
    built = build(cmd, gpu="a100_80gb_sxm", workload=Workload(requests=10))
    engine = built.raw["machines"]["box"]["engine"]
    assert engine["scheduler"] == {"max_num_batched_tokens": 2048, "block_size": 64, "enable_chunked_prefill": True,
                                   "enable_prefix_caching": True, "preemption_mode": "recompute", "max_num_seqs": 64,
                                   "gpu_memory_utilization": 0.85}
    assert engine["iteration"] == {"server": "vllm"} and engine["runtime_gib"] == 2.0
    model = built.raw["models"]["llama_3_1_8b"]
    assert model["dense"]["kv_kib_per_token"] == 64.0  # fp8: 1 byte per value
    assert 8 < model["weights_gib"] < 9  # fp8 weights, bf16 embeddings and head
    assert built.raw["serve"]["workload"] == {"kind": "open", "rate_per_s": 1.0, "arrival_law": "poisson"}


def test_tensor_parallel_awq_and_refusals():
    built = build(parse_command(f"vllm serve {LLAMA} -tp 2 -q awq"), gpu="h100_sxm")
    assert built.raw["machines"]["box"]["engine"]["tensor_parallel"] == 2
    assert len(built.raw["machines"]["box"]["gpus"]) == 2
    assert 5 < built.raw["models"]["llama_3_1_8b"]["weights_gib"] < 6.5  # 4-bit matrices, bf16 head and embeddings
    with pytest.raises(ScenarioError, match="--gpus"):
        build(parse_command(f"vllm serve {LLAMA} -tp 4"), gpu="h100_sxm", gpus=2)
    with pytest.raises(ScenarioError, match="routed experts"):
        build(parse_command("vllm serve Qwen/Qwen3-30B-A3B"), gpu="h100_sxm")
    with pytest.raises(ScenarioError, match="max_model_len"):
        build(parse_command(f"vllm serve {LLAMA} --max-model-len 512"), gpu="h100_sxm")
    with pytest.raises(SimulationError, match="vLLM refuses to start"):
        build(parse_command(f"vllm serve {LLAMA}"), gpu="rtx4090")  # 131,072 tokens of KV do not fit


def test_sglang_scenario_runtime_and_running_requests():
    built = build(parse_command(f"python -m sglang.launch_server --model-path {LLAMA} --mem-fraction-static 0.8"),
                  gpu="h100_sxm")
    engine = built.raw["machines"]["box"]["engine"]
    assert engine["runtime_gib"] == pytest.approx(16.0) and engine["iteration"] == {"server": "sglang"}
    assert engine["scheduler"]["max_num_seqs"] == 2048 and engine["scheduler"]["block_size"] == 1
    assert engine["scheduler"]["max_num_batched_tokens"] == 8192


RUN = ["vllm", f"vllm serve {LLAMA} --max-num-seqs 64 --gpu-memory-utilization 0.85 --enable-prefix-caching",
       "--gpu", "a100_80gb_sxm", "--requests", "50"]


def test_sim_vllm_runs_a_line_and_gives_metrics():
    result = invoke(*RUN)
    assert result.exit_code == 0, result.output
    assert "max_num_seqs                    64  from the command line (--max-num-seqs)" in result.stdout
    assert "default of vLLM 0.34.0" in result.stdout and "50 requests completed" in result.stdout
    doc = json.loads(invoke(*RUN, "--json").stdout)
    assert doc["metrics"]["requests_completed"] == 50 and doc["metrics"]["throughput_tok_s"] > 0
    assert doc["metrics"]["ttft_p50_s"] > 0


@pytest.mark.parametrize("line", [RUN[1], f"sglang serve --model-path {LLAMA} --tp 1 --chunked-prefill-size 4096 "
                                          "--port 30000"])
def test_written_scenario_runs_to_the_same_json(tmp_path, line):
    path = str(tmp_path / "s.yaml")
    args = ["vllm", line, "--gpu", "a100_80gb_sxm", "--requests", "50", "--seed", "3"]
    written = invoke(*args, "--write", path, "--json")
    assert written.exit_code == 0, written.output
    again = invoke("run", path, "--json")
    assert again.exit_code == 0, again.output
    assert written.stdout == again.stdout  # byte for byte
    text = open(path, encoding="utf-8").read()
    assert text.startswith("# Written by: sim vllm") and "from the command line" in text
    only = invoke(*args, "--write", str(tmp_path / "t.yaml"), "--no-run")
    assert only.exit_code == 0 and "wrote" in only.stdout and "requests completed" not in only.stdout
    direct = json.loads(invoke(*args, "--json").stdout)
    assert direct["metrics"] == json.loads(again.stdout)["metrics"]


@pytest.mark.parametrize("args,where", [
    (["vllm serve m --max-num-seqs", "--gpu", "a100_80gb_sxm"], "--max-num-seqs"),
    ([f"vllm serve {LLAMA}", "--gpu", "no_such_gpu"], "--gpu"),
    ([f"vllm serve {LLAMA}"], "--gpu"),
    ([f"vllm serve {LLAMA} -pp 2", "--gpu", "h100_sxm"], "pipeline parallelism"),
    ([f"vllm serve {LLAMA}", "--gpu", "h100_sxm", "--rate", "2", "--clients", "4"], "--rate"),
    ([f"sglang serve --model-path {LLAMA}", "--gpu", "h100_sxm", "--engine-version", "0.5.4"], "sglang serve"),
])
def test_bad_input_is_one_line_exit_2(args, where):
    result = invoke("vllm", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sim: error:") and where in lines[0]


WORDS = ["vllm", "serve", "sglang", "python", "-m", "vllm.entrypoints.openai.api_server", "sglang.launch_server",
         LLAMA, "--model", "--model-path", "--max-num-seqs", "-tp", "--tp", "--gpu-memory-utilization",
         "--mem-fraction-static", "--kv-cache-dtype", "--dtype", "--quantization", "--chunked-prefill-size",
         "--speculative-config", "--enable-prefix-caching", "--no-enable-chunked-prefill", "--max-model-len",
         "--block-size", "--page-size", "--context-length", "--port", "--host", "0", "1", "-1", "0.5", "2.0", "8k",
         "fp8", "auto", "awq", "true", "{", "}", "'", '"', "=", "|", "\\\n", "#", "VLLM_USE_V1=0", "--x", "", "1e9"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(WORDS) | st.text(max_size=12), max_size=14), st.sampled_from([" ", "=", ""]))
def test_token_soup_raises_only_the_one_line_error(words, joiner):
    line = joiner.join(words) if joiner != " " else " ".join(words)
    for text in (line, "vllm serve " + line, "python -m sglang.launch_server " + line):
        try:
            cmd = parse_command(text)
        except ScenarioError as exc:
            assert "\n" not in str(exc)
            continue
        try:
            resolve(cmd.engine, CURRENT[cmd.engine], cmd.settings, cmd.flags, gpu=H100, context_tokens=8192,
                    env=cmd.env)
        except ScenarioError as exc:
            assert "\n" not in str(exc)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(WORDS[8:]), max_size=8))
def test_token_soup_builds_or_says_why(words):
    try:
        built = build(parse_command(f"vllm serve {LLAMA} " + " ".join(w for w in words if w != "\\\n")),
                      gpu="h100_sxm", workload=Workload(requests=5, prompt=100, gen=10))
    except (ScenarioError, SimulationError) as exc:
        assert "\n" not in str(exc).strip() or isinstance(exc, ScenarioError)
        return
    assert built.raw["serve"]["requests"] == 5
