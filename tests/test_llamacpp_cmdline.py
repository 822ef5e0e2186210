"""Pasted llama.cpp command lines: the settings, llama-bench sweeps and bench sizes they give, their errors (one
ScenarioError line naming the flag), and to_command's flags reading back to the same settings."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sim.core.errors import ScenarioError
from sim.llamacpp import cmdline
from sim.llamacpp.cmdline import ALL_LAYERS, BENCH_DEFAULTS, parse_command, split_rules, to_command

# command lines as the public excerpts in tests/data/llamacpp print them
IK357 = ('./bin/llama-sweep-bench -m $model -c 32768 -t 16 -ngl 100 -fa '
         '-ot "blk\\.3[4-9]\\.ffn=CPU,blk\\.4[0-9]\\.ffn=CPU"')
IK399 = ("fizz@MAMMON:~$ ik_llama.cpp/build/bin/llama-bench -fa 0,1 -amb 128,512 -fmoe 1 -ot exps=CPU -ngl 99 "
         "-m ~/ggufs/REPACK-Qwen_Qwen3-30B-A3B-IQ4_XS.gguf")
IK2199 = ("llama-bench -m Qwen3.6-35B-A3B-UD-Q4_K_M.gguf -ngl 99 --n-cpu-moe 99 -t 12 -b 2048 -ub 2048 --flash-attn 1 "
          "-ctk q4_0 -ctv q8_0 -p 512 -n 128 -r 2")
LCPP12922 = ("./build/bin/llama-bench -m ../models/DeepSeek-Coder-V2-Lite-Base-Q6_K_L.gguf -p 4096 -n 4096 -t 4 -fa 1 "
             "-ctk q8_0 -ctv q8_0 -ngl 0")


def test_sweep_bench_line():
    cmd = parse_command(IK357)
    assert cmd.program == "llama-sweep-bench" and cmd.model_path == "$model"
    assert cmd.settings == {"ctx_size": 32768, "threads": 16, "n_gpu_layers": 100, "flash_attn": True,
                            "override_tensor": ["blk\\.3[4-9]\\.ffn=CPU", "blk\\.4[0-9]\\.ffn=CPU"]}
    # ub 512 prompt tokens, ub/4 generated, at depths 0, 512, ... below -c; one repetition
    assert cmd.bench["n_prompt"] == [512] and cmd.bench["n_gen"] == [128] and cmd.bench["repetitions"] == [1]
    assert cmd.bench["n_depth"] == list(range(0, 32768, 512))
    other = parse_command("llama-sweep-bench -m m.gguf -c 4096 -ub 1024 -n 64 -nrep 3 --sweep-stride 2 -fa -rtr -fmoe")
    assert other.bench == {"n_prompt": [1024], "n_gen": [64], "n_depth": [0, 2048], "repetitions": [3]}
    assert other.settings["flash_attn"] is True and other.unknown == ["-rtr", "-fmoe"]


def test_llama_bench_lines():
    cmd = parse_command(IK399)
    assert cmd.program == "llama-bench" and cmd.model_path == "~/ggufs/REPACK-Qwen_Qwen3-30B-A3B-IQ4_XS.gguf"
    assert cmd.settings == {"override_tensor": ["exps=CPU"], "n_gpu_layers": 99}
    assert cmd.sweeps == {"flash_attn": [False, True]}
    assert cmd.unknown == ["-amb 128,512", "-fmoe 1"]  # ik_llama.cpp flags the model does not use
    assert cmd.bench == BENCH_DEFAULTS
    cmd = parse_command(IK2199)
    assert cmd.settings == {"n_gpu_layers": 99, "n_cpu_moe": 99, "threads": 12, "batch_size": 2048,
                            "ubatch_size": 2048, "flash_attn": True, "cache_type_k": "q4_0", "cache_type_v": "q8_0"}
    assert cmd.bench == {"n_prompt": [512], "n_gen": [128], "n_depth": [0], "repetitions": [2]}
    cmd = parse_command(LCPP12922)
    assert cmd.bench["n_prompt"] == [4096] and cmd.bench["n_gen"] == [4096] and cmd.settings["n_gpu_layers"] == 0


def test_llama_bench_sweeps_ranges_and_groups():
    cmd = parse_command("llama-bench -m a.gguf,b.gguf -ngl 10-40+10 -ncmoe 1-8*2 -t 8 -t 16 -p 512,1024 -n 0 "
                        "-pg 512,128 -pg 1024,64 -d 0,4096 -ts 3/1,1/1 -ot 'exps=CPU;attn=CUDA0,,ffn=CPU' "
                        "-mmp 0 -nkvo 1 -nopo 0 -fa on,auto -ub 512, -dev CUDA0/CUDA1 -o csv -r 3")
    assert cmd.model_path == "a.gguf" and cmd.sweeps["model_path"] == ["a.gguf", "b.gguf"]
    assert cmd.sweeps["n_gpu_layers"] == [10, 20, 30, 40] and cmd.sweeps["n_cpu_moe"] == [1, 2, 4, 8]
    assert cmd.sweeps["threads"] == [8, 16]  # a repeated flag adds values
    assert cmd.sweeps["tensor_split"] == [[3.0, 1.0], [1.0, 1.0]]
    assert cmd.sweeps["override_tensor"] == [["exps=CPU", "attn=CUDA0"], [], ["ffn=CPU"]]
    assert cmd.sweeps["flash_attn"] == [True, "auto"]
    assert cmd.settings == {"mmap": False, "kv_offload": False, "op_offload": True, "ubatch_size": 512,
                            "device": "CUDA0/CUDA1"}
    assert cmd.bench == {"n_prompt": [512, 1024], "n_gen": [0], "prompt_gen": [[512, 128], [1024, 64]],
                         "n_depth": [0, 4096], "repetitions": [3]}
    assert cmd.ignored == ["-o csv"]
    assert parse_command("llama-bench -ngl -1 -m x").settings["n_gpu_layers"] == -1


def test_server_line_with_shell_syntax():
    line = ("CUDA_VISIBLE_DEVICES=0,1 ./build/bin/llama-server \\\n  -m '/models/my model.gguf' --ctx-size=8192 "
            "-ngl all -fa on \\\n  --n-cpu-moe 20 -ot \"blk\\.[0-9]{1,2}\\.ffn_up=CPU,token_embd=CPU\" "
            "-ot output=CUDA0 --host 0.0.0.0 --port 8080 --jinja -ts 3/1 --no-mmap -nkvo --temp 0.7 -s 42 -v "
            "--metrics --alias qwen --api-key k -np 4 -cb -dev CUDA0,CUDA1 -tb 16 --threads=8 -ub 1024 -b 4096 "
            "-ctk q8_0 --cache_type_v q8_0 -sm row -mg 1 --no-op-offload -n 256 --mlock --numa distribute "
            "--weird-flag 3 2>&1 | tee log.txt  # a comment")
    cmd = parse_command(line)
    assert cmd.program == "llama-server" and cmd.model_path == "/models/my model.gguf"
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert cmd.settings == {
        "ctx_size": 8192, "n_gpu_layers": ALL_LAYERS, "flash_attn": True, "n_cpu_moe": 20,
        "override_tensor": ["blk\\.[0-9]{1,2}\\.ffn_up=CPU", "token_embd=CPU", "output=CUDA0"],
        "tensor_split": [3.0, 1.0], "mmap": False, "kv_offload": False, "parallel": 4, "cont_batching": True,
        "device": "CUDA0,CUDA1", "threads_batch": 16, "threads": 8, "ubatch_size": 1024, "batch_size": 4096,
        "cache_type_k": "q8_0", "cache_type_v": "q8_0", "split_mode": "row", "main_gpu": 1, "op_offload": False,
        "n_predict": 256, "mlock": True}
    assert cmd.ignored == ["--host 0.0.0.0", "--port 8080", "--jinja", "--temp 0.7", "-s 42", "-v", "--metrics",
                           "--alias qwen", "--api-key k", "2>&1", "| tee log.txt"]
    assert cmd.unknown == ["--numa distribute", "--weird-flag 3"]


@pytest.mark.parametrize(("flags", "expected"), [
    ("-ngl 999", 999), ("-ngl all", ALL_LAYERS), ("-ngl auto", -1), ("-ngl -1", -1), ("--gpu-layers 12", 12),
    ("--n-gpu-layers=7", 7), ("--n_gpu_layers 5", 5)])
def test_gpu_layers(flags, expected):
    assert parse_command(f"llama-server -m m.gguf {flags}").settings == {"n_gpu_layers": expected}


@pytest.mark.parametrize(("flags", "expected"), [
    ("-fa", True), ("-fa -ngl 3", True), ("-fa on", True), ("-fa off", False), ("-fa auto", "auto"), ("-fa 1", True),
    ("-fa 0", False), ("--flash-attn=on", True), ("-no-fa", False), ("--flash-attn enabled", True)])
def test_flash_attention(flags, expected):
    assert parse_command(f"llama-cli -m m.gguf {flags}").settings["flash_attn"] == expected


@pytest.mark.parametrize(("flags", "expected"), [
    ("--mmap", {"mmap": True}), ("--no-mmap", {"mmap": False}), ("-lm none", {"mmap": False}),
    ("-lm mmap+mlock", {"mmap": True, "mlock": True}), ("--load-mode mlock", {"mmap": False, "mlock": True}),
    ("-kvo", {"kv_offload": True}), ("--op-offload", {"op_offload": True}), ("-nocb", {"cont_batching": False}),
    ("-cmoe", {"cpu_moe": True}), ("-fit off", {"fit": False}), ("-ts 3,1", {"tensor_split": [3.0, 1.0]}),
    ("-ts 0.5/0.25/0.25", {"tensor_split": [0.5, 0.25, 0.25]}), ("-sm LAYER", {"split_mode": "layer"})])
def test_switches(flags, expected):
    assert parse_command(f"llama-server -m m.gguf {flags}").settings == expected


def test_program_names_and_prefixes():
    cmd = parse_command(r"C:\llama\llama-server.exe -m C:\models\m.gguf --override-tensor=exps=CPU -hf org/repo")
    assert cmd.program == "llama-server" and cmd.model_path == r"C:\models\m.gguf"  # Windows keeps backslashes
    assert cmd.settings == {"override_tensor": ["exps=CPU"]} and cmd.unknown == ["-hf org/repo"]
    assert parse_command("./main -m m.gguf -n 5").program == "llama-cli"
    cmd = parse_command("taskset -c 0-7 llama-cli -m m.gguf -c 512")
    assert cmd.settings == {"ctx_size": 512} and cmd.unknown == ["taskset", "-c", "0-7"]
    cmd = parse_command("some log line\n$ llama-bench -m m.gguf -p 64\nnext line")  # the first command found
    assert cmd.bench["n_prompt"] == [64]


@pytest.mark.parametrize(("line", "flag", "problem"), [
    ("llama-server -m m.gguf -c", "-c", "expected a value after -c"),
    ("llama-server -c abc", "-c", "expected an integer, got 'abc'"),
    ("llama-server --ctx-size=-5", "--ctx-size", "expected an integer >= 0, got -5"),
    ("llama-server -ngl many", "-ngl", "expected a number of layers, 'auto' or 'all', got 'many'"),
    ("llama-server -ot exps", "-ot", "expected rules 'regex=BUFFER'"),
    ("llama-server -ot =CPU", "-ot", "expected rules 'regex=BUFFER'"),
    ("llama-server -ts 3,x", "-ts", "expected a non-negative number, got 'x'"),
    ("llama-server -sm diagonal", "-sm", "expected one of none, layer, row"),
    ("llama-server -lm fast", "-lm", "expected one of auto, mmap, none"),
    ("llama-server --mmap=1", "--mmap", "expected no value after --mmap"),
    ("llama-server -ctk 'q8 0'", "-ctk", "expected a cache type"),
    ("llama-server -ub 0", "-ub", "expected an integer >= 1, got 0"),
    ("llama-bench -ngl 1-10+0", "-ngl", "expected a range whose values increase"),
    ("llama-bench -p 1-8*1", "-p", "expected a range whose values increase"),
    ("llama-bench -p 0-100000", "-p", "expected at most 4096 values"),
    ("llama-bench -t -4", "-t", "expected integers, comma lists or ranges"),
    ("llama-bench -pg 512", "-pg", "expected pp,tg"),
    ("llama-bench -mmp yes", "-mmp", "expected 0 or 1, got 'yes'"),
    ("llama-bench -fa 0,,1", "-fa", "expected a comma list without empty values"),
    ("llama-bench -r 0", "-r", "expected an integer >= 1, got 0"),
    ("llama-bench -n 99999999999", "-n", "expected an integer, got '99999999999'"),
])
def test_errors_name_the_flag(line, flag, problem):
    with pytest.raises(ScenarioError) as caught:
        parse_command(line)
    error = caught.value
    assert error.source == "command line" and error.path == flag and problem in error.problem
    assert "\n" not in str(error)


@pytest.mark.parametrize("line", ["", "ls -la", "python main.py -c 5", "llama-server -m 'unclosed"])
def test_no_command_or_bad_quoting(line):
    with pytest.raises(ScenarioError, match="command line: "):
        parse_command(line)


def test_split_rules_keeps_commas_inside_a_regex():
    assert split_rules("a=CPU,b{1,2}=CPU,[x,y]=CUDA0,(p|q,r)=CPU,\\,=CPU") == [
        "a=CPU", "b{1,2}=CPU", "[x,y]=CUDA0", "(p|q,r)=CPU", "\\,=CPU"]


def test_to_command_writes_pasteable_flags():
    text = to_command({"n_gpu_layers": 99, "override_tensor": ["blk\\.(1|2)\\.ffn=CPU"], "flash_attn": "auto",
                       "tensor_split": [3, 1]}, model_path="/m/x y.gguf")
    assert text == ("llama-server -m '/m/x y.gguf' --n-gpu-layers 99 --override-tensor 'blk\\.(1|2)\\.ffn=CPU' "
                    "--flash-attn auto --tensor-split 3.0,1.0")
    assert shlex.split(text)[6] == "blk\\.(1|2)\\.ffn=CPU"
    bench = to_command({"override_tensor": ["a=CPU", "b=CUDA0"], "kv_offload": False, "tensor_split": [1.0, 1.0],
                        "flash_attn": True, "mmap": True}, "llama-bench")
    assert bench == ("llama-bench -m MODEL.gguf --override-tensor 'a=CPU;b=CUDA0' --flash-attn 1 --mmap 1 "
                     "--tensor-split 1.0/1.0 --no-kv-offload 1")
    assert to_command({"cpu_moe": False, "mlock": False}) == "llama-server -m MODEL.gguf"  # defaults: nothing


@pytest.mark.parametrize(("settings_", "program", "key"), [
    ({"ctx_size": "big"}, "llama-server", "ctx_size"), ({"ctx_size": True}, "llama-server", "ctx_size"),
    ({"batch_size": 0}, "llama-server", "batch_size"), ({"flash_attn": "yes"}, "llama-server", "flash_attn"),
    ({"override_tensor": ["a=CPU,b=CPU"]}, "llama-server", "override_tensor"),
    ({"override_tensor": ["nobuffer"]}, "llama-server", "override_tensor"),
    ({"override_tensor": []}, "llama-server", "override_tensor"),
    ({"tensor_split": [1, -1]}, "llama-server", "tensor_split"), ({"split_mode": "x"}, "llama-server", "split_mode"),
    ({"cpu_moe": True}, "llama-bench", "cpu_moe"), ({"device": "CUDA0,CUDA1"}, "llama-bench", "device"),
    ({"ctx_size": 5}, "llama-bench", "ctx_size"), ({"colour": 1}, "llama-server", "colour"),
    ({}, "llama-run", "program")])
def test_to_command_refuses_bad_settings(settings_, program, key):
    with pytest.raises(ScenarioError) as caught:
        to_command(settings_, program)
    assert caught.value.path == key


# round trips -------------------------------------------------------------------------------------------------------

INT32 = st.integers(-(2**31 - 1), 2**31 - 1)
COUNT = st.integers(0, 2**31 - 1)
CTYPES = st.sampled_from(["f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1", "q8_KV"])
BUFFERS = st.sampled_from(["CPU", "CUDA0", "CUDA1", "CUDA_Host", "Vulkan0", "Metal", "ROCm0", "RPC[10.0.0.2:50052]"])
PATTERN = st.text(st.sampled_from(list("abkl._0129\\.*+?|^$()[]{}- '\"#;&<>")), min_size=1, max_size=24)
RULE = st.builds(lambda p, b: f"{p}={b}", PATTERN, BUFFERS) | st.sampled_from(
    ["blk\\.[0-9]{1,2}\\.ffn_(up|down)_exps=CPU", "(a,b)=CPU", "[x,y]=CUDA0", "exps=CPU", "\\.ffn_.*=CUDA1"])
RATIOS = st.lists(st.floats(0, 1e6, allow_nan=False) | st.integers(0, 1000), min_size=1, max_size=4).map(
    lambda values: [float(v) for v in values])
DEVICE = st.text(st.sampled_from(list("CUDA0123,/nonevulkan-_:.")), min_size=1, max_size=16)

SERVER = {
    "n_gpu_layers": INT32, "n_cpu_moe": COUNT, "cpu_moe": st.just(True), "override_tensor": st.lists(RULE, min_size=1,
                                                                                                    max_size=4),
    "ctx_size": COUNT, "batch_size": st.integers(1, 2**31 - 1), "ubatch_size": st.integers(1, 2**31 - 1),
    "threads": INT32, "threads_batch": INT32, "flash_attn": st.sampled_from([True, False, "auto"]),
    "cache_type_k": CTYPES, "cache_type_v": CTYPES, "parallel": INT32, "mmap": st.booleans(), "mlock": st.just(True),
    "tensor_split": RATIOS, "split_mode": st.sampled_from(cmdline.SPLIT_MODES), "main_gpu": COUNT,
    "kv_offload": st.booleans(), "op_offload": st.booleans(), "n_predict": INT32, "cont_batching": st.booleans(),
    "device": DEVICE, "fit": st.booleans(),
}
BENCH = {key: SERVER[key] for key, out in cmdline._OUT.items() if out[2]}
BENCH["threads"] = COUNT
BENCH["device"] = DEVICE.filter(lambda d: "," not in d)
BENCH["override_tensor"] = st.lists(RULE.filter(lambda r: ";" not in r), min_size=1, max_size=4)


def settings_of(table: dict) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({}, optional=table)


@settings(max_examples=60)
@given(settings_of(SERVER), st.sampled_from(["llama-server", "llama-cli", "llama-sweep-bench"]))
def test_round_trip(given_settings, program):
    if program == "llama-sweep-bench":  # its depths 0, ub, 2 ub ... below -c are listed: at most MAX_VALUES
        assume(given_settings.get("ctx_size", 0) < cmdline.MAX_VALUES * given_settings.get("ubatch_size", 512))
    cmd = parse_command(to_command(given_settings, program, "/models/a b.gguf"))
    assert cmd.settings == given_settings and cmd.model_path == "/models/a b.gguf" and cmd.program == program
    assert cmd.unknown == [] and cmd.ignored == []


@settings(max_examples=40)
@given(settings_of(BENCH))
def test_round_trip_llama_bench(given_settings):
    cmd = parse_command(to_command(given_settings, "llama-bench"))
    assert cmd.settings == given_settings and cmd.sweeps == {} and cmd.bench == BENCH_DEFAULTS


TOKENS = st.sampled_from(["-ngl", "-c", "-ot", "-fa", "-ts", "--ctx-size=", "-p", "-d", "-pg", "-r", "-mmp", "-lm",
                          "1", "-1", "0,1", "1-8+2", "4-1", "all", "a=CPU", "x", "'", '"', "\\", "|", "2>&1", "#",
                          "=", ",", ";", "\n", "\\\n", "--", "-", "9" * 30, "1e999"])


@settings(max_examples=80)
@given(st.sampled_from(["llama-server", "llama-bench", "llama-sweep-bench", "llama-cli"]),
       st.lists(TOKENS | st.text(max_size=8), max_size=12))
def test_any_line_parses_or_raises_one_scenario_error(program, words):
    try:
        cmd = parse_command(" ".join([program, *words]))
    except ScenarioError as error:
        assert "\n" not in str(error)
    else:
        assert cmd.program == program
