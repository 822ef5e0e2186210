"""The fuzz campaign over the command surfaces other than scenario files (tests/test_fuzz.py has those): pasted
llama.cpp and vLLM command lines, ``sim llama`` and ``sim advise`` options, ``compare --vs`` variants, ``catalog``
names and ``capacity --goal`` strings; the model files, llama-bench outputs and fits' tables are in
tests/test_fuzz_formats.py. Each case runs ``sim`` in-process and must end in a result or one-line errors, never
exit 70 or a traceback, within 5 s and 200 MiB (tests/fuzz_support.py says why and how they are measured); a sample
runs in a bounded child process for its whole memory. Seeds are fixed (``derandomize``); ``SIM_FUZZ_SCALE=10``
tries ten times as many cases, ``SIM_FUZZ_STATS=stats.json`` writes the statistics per command.
"""

from __future__ import annotations

import os
import shlex

from fuzz_support import (  # noqa: F401 (fuzz_stats: the session fixture writing the statistics)
    bounded,
    fuzz,
    fuzz_stats,
    invoke,
    number_texts,
    path,
)
from hypothesis import given
from hypothesis import strategies as st

QWEN = path("calibration", "models", "qwen3-30b-a3b.json")
MODELS = [QWEN, path("calibration", "models", "qwen3-4b.json"), path("calibration", "models", "gpt-oss-20b.json")]
QUANTS = ["Q4_K_M", "Q4_K_M", "Q8_0", "MXFP4_MOE", "IQ4_XS", "BF16", "UD-Q4_K_XL", "q4_k_m", "Q9_Z", "", "Q4_K_M,Q8_0"]
MACHINES = [("rtx4060ti_16gb", "ryzen7_9700x"), ("rtx3070ti", "ryzen5_5600x"), ("rtx4090", "ryzen9_7950x"),
            ("rtx5090", "ryzen9_9950x"), ("rx7900xtx", "ryzen7_5800x")]

# --- sim llama: pasted llama.cpp command lines ---------------------------------------------------------------------

PROGRAMS = ["llama-server", "llama-server", "llama-cli", "./build/bin/llama-server", "llama-bench", "./llama-bench",
            "llama-sweep-bench", "llama-batched-bench", "server", "main", "CUDA_VISIBLE_DEVICES=0 llama-server",
            "env GGML_CUDA=1 llama-cli", "$ llama-server", "numactl -N0 llama-bench", "", "llama-serv", "python3",
            "C:\\llama\\llama-server.exe", "llama-server llama-server"]
COUNTS = ["99", "0", "-1", "auto", "all", "48", "4096", "8192", "131072", "1", "2", "16", "999999999999",
          "2147483648", "5" * 5000, "abc", "1.5", "", "1,2,4", "0-99+33", "0-8*2", "5-1", "-5", "1e3", "8k", "512,1024",
          "1-64", "0-1+0", "1-2*1", "1,,2", "0x10", "1-2-3", "\u0663", "0-4095", "1-1000000"]
COUNT_FLAGS = ["-ngl", "--n-gpu-layers", "--gpu-layers", "-c", "--ctx-size", "-b", "--batch-size", "-ub",
               "--ubatch-size", "-t", "-tb", "-np", "--parallel", "--n-cpu-moe", "-ncmoe", "-mg", "-n", "-p", "-d",
               "-r", "-nrep", "-npp", "-ntg", "-npl", "--sweep-stride", "-pg"]
REGEXES = ["exps=CPU", "\\.ffn_.*_exps\\.=CPU", "blk\\.(1|2)\\.ffn=CPU",
           "blk\\.([0-9]|1[0-9])\\.ffn_(up|down)_exps=CPU", "exps=CUDA0", "exps=CUDA7", "token_embd=CPU",
           "=CPU", "exps=", "exps", "[=CPU", "(=CPU", "a{1,9999}=CPU", "exps=CPU,blk=CUDA0", "exps=CPU;blk\\.1=CPU",
           "x=y=z", ".*=CPU", "\\=CPU", "", "(?i)EXPS=CPU", "(?P<a>x)(?P=a)=CPU", "\\d+=CPU", "exps=cpu",
           "exps=Vulkan0", "ffn_(gate|up)_exps=CUDA0,ffn_down_exps=CPU"]
SHARES = ["1,1", "3/1", "1", "0", "0,0", "-1,2", "1e300,1", "nan", "", ",", "1,2,3,4,5,6,7,8,9", "a,b", "inf", "1;1"]
WORDS = {"-fa": [None, "on", "off", "auto", "1", "0", "-1", "maybe"], "--flash-attn": [None, "on", "enabled"],
         "-ctk": ["f16", "q8_0", "q4_0", "bf16", "iq4_nl", "q5_1", "xyz", "", "f16,q8_0"], "-ctv": ["q8_0", "q4_0",
         "f32", "?"], "-sm": ["layer", "row", "none", "graph", "tensor", "bogus", "layer,row"], "-lm": ["mmap", "none",
         "mlock", "dio", "auto", "x"], "-mmp": ["0", "1", "2", "0,1"], "-nkvo": ["1", "0", None], "-dev": ["CUDA0",
         "CUDA0,CUDA1", "none", "Vulkan0", "CUDA0/CUDA1"], "-fit": ["on", "off", None], "--temp": ["0.7"],
         "--host": ["0.0.0.0"], "--port": ["8080"], "--no-mmap": [None], "--mmap": [None], "--mlock": [None],
         "-cb": [None], "--cpu-moe": [None], "-cmoe": [None], "-nopo": [None, "1"], "--frobnicate": ["3", None],
         "-zz": [None], "--model": ["x.gguf", ""], "-m": ["y.gguf", ""], "-ot": REGEXES, "--override-tensor": REGEXES,
         "-ts": SHARES, "--tensor-split": SHARES, "-o": ["md", "json"], "--progress": [None], "-pps": [None],
         "--dry-multiplier": ["0.8"], "-sys": ["'You are helpful'"], "--ctx-size=8192": [None], "-c=4096": [None],
         "--n-gpu-layers=99": [None], "--": [None], "-": [None]}


@st.composite
def flag_value(draw) -> list[str]:
    """One flag and its value as words (quoted, joined with ``=``, or left bare)."""
    if draw(st.integers(0, 2)) == 0:
        flag = draw(st.sampled_from(sorted(WORDS)))
        value = draw(st.sampled_from(WORDS[flag]))
    else:
        flag = draw(st.sampled_from(COUNT_FLAGS))
        value = draw(st.one_of(st.sampled_from(COUNTS), number_texts()))
    if value is None:
        return [flag]
    how = draw(st.sampled_from(["plain", "plain", "quote", "double", "eq", "unbalanced"]))
    if how == "quote":
        return [flag, shlex.quote(value)]
    if how == "double":
        return [flag, '"' + value.replace('"', '\\"') + '"']
    if how == "eq":
        return [f"{flag}={shlex.quote(value)}"]
    if how == "unbalanced":
        return [flag, "'" + value]
    return [flag, value]


@st.composite
def llama_lines(draw) -> str:
    """A pasted llama.cpp command line: a program (or none, or a wrong one), maybe a model, up to ten flags (repeats
    and contradictions included), joined by spaces, tabs or line continuations, with a comment, pipe or stray quote
    after it; or any text at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=80))
    program = draw(st.sampled_from(PROGRAMS))
    words = [program] if program else []
    if draw(st.booleans()):
        words += ["-m", draw(st.sampled_from(["x.gguf", "Qwen3-30B-A3B-Q4_K_M.gguf", "/models/q.gguf",
                                              "'my model.gguf'", "\"a b.gguf\""]))]
    for _ in range(draw(st.integers(0, 10))):
        words += draw(flag_value())
    joiner = draw(st.sampled_from([" ", " ", " ", "  ", " \\\n  ", "\t", " \\\r\n "]))
    tail = draw(st.sampled_from(["", "", "", " # comment", " 2>&1 | tee log.txt", " > out.txt", " \\", " '", ' "',
                                 " &", "; echo done", " \\\n"]))
    return joiner.join(words) + tail


def machine(draw) -> list[str]:
    """--model, --quant, --gpu and --host of a machine that loads the model (the catalog's, a shipped config)."""
    gpu, host = draw(st.sampled_from(MACHINES))
    return ["--model", draw(st.sampled_from(MODELS)), "--quant", draw(st.sampled_from(QUANTS[:3] + ["MXFP4_MOE"])),
            "--gpu", gpu, "--host", host]


@fuzz(450)
@given(data=st.data())
def test_pasted_llama_lines_run_or_are_refused_in_one_line(data, tmp_path_factory):
    """Random, repeated, malformed and extreme llama.cpp flags in a pasted line, run on a catalog machine (or
    written as a scenario, or printed as JSON)."""
    line = data.draw(llama_lines())
    args = ["llama", line, *machine(data.draw)]
    extra = data.draw(st.sampled_from(["", "", "--json", "--json", "--write", "--gpus", "--os"]))
    if extra == "--write":
        args += ["--write", str(tmp_path_factory.mktemp("w") / "s.yaml")]
    elif extra == "--gpus":
        args += ["--gpus", data.draw(st.sampled_from(["2", "3", "4"]))]
    elif extra == "--os":
        args += ["--os", data.draw(st.sampled_from(["windows", "macos"]))]
    elif extra:
        args.append(extra)
    invoke("llama", args)


PATHOLOGICAL_ATOMS = [".", "\\w", "[a-z_.0-9]", "a", "(.|.)", "(.*)", "(.+)", "(\\w|\\.)", "(b|bl|blk)", "[^=]"]


@st.composite
def pathological_regexes(draw) -> str:
    """A regex of nested quantifiers ending in what no tensor name holds: exponential for a backtracking engine."""
    atom = draw(st.sampled_from(PATHOLOGICAL_ATOMS))
    inner = draw(st.sampled_from(["*", "+", "{1,9}", "*?", ""]))
    outer = draw(st.sampled_from(["*", "+", "{2,}"]))
    end = draw(st.sampled_from(["Z", "$x", "=", "!", "#", "\\d{99}", "Q"]))
    return f"({atom}{inner}){outer}{end}={draw(st.sampled_from(['CPU', 'CUDA0']))}"


@fuzz(20)
@given(regex=pathological_regexes(), flag=st.sampled_from(["-ot", "--override-tensor"]),
       program=st.sampled_from(["llama-server", "llama-bench"]))
def test_pathological_override_regexes_are_bounded(regex, flag, program):
    """A user pastes anything into -ot: a regex that backtracks exponentially must still end within the cap."""
    invoke("llama", ["llama", f"{program} -m x.gguf -ngl 99 {flag} {shlex.quote(regex)}", "--model", QWEN, "--quant",
                     "Q4_K_M", "--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x", "--write", "/dev/null"])


OPTION_VALUES = {"--gpus": ["1", "2", "0", "-1", "9999999999", "64", "65", "5" * 5000, "1.5", "x"],
                 "--ram-gib": ["32", "0", "-1", "1e300", "nan", "inf", "0.001", "1e-320", "x", "-0"],
                 "--model-gib": ["17.28", "0", "-1", "1e300", "nan", "inf", "0.01", "x"],
                 "--slot-gen": ["3", "4", "0", "-1", "6", "99", "2147483648", "x"],
                 "--slot-lanes": ["16", "8", "1", "0", "-1", "3", "64", "999999"],
                 "--reserved-gib": ["0", "1", "-1", "1e300", "nan", "15.9", "16", "99"],
                 "--gpu-gib": ["8", "0", "-1", "1e300", "nan", "120"],
                 "--os": ["linux", "windows", "macos", "dos", ""],
                 "--gpu": ["rtx4090", "RTX4090", "rtx9999", "", "x" * 10000, "grace_gb10", "ryzen7_9700x", "../x"],
                 "--host": ["ryzen9_7950x", "apple_m4_max", "grace_gb10", "rtx4090", "", "h" * 5000],
                 "--quant": QUANTS, "--model": MODELS + ["/nonexistent.json", "/dev/null", "/tmp", "a\0b.json",
                                                         path("calibration", "models", "index.yaml"), ""]}


@st.composite
def machine_options(draw, options: dict[str, list[str]] = OPTION_VALUES) -> list[str]:
    """The machine options of sim llama and sim advise, each at a default or a fuzzed value."""
    words = machine(draw)
    for option in draw(st.lists(st.sampled_from(sorted(options)), max_size=4, unique=True)):
        value = draw(st.one_of(st.sampled_from(options[option]), number_texts()) if option not in
                     ("--os", "--model", "--quant", "--gpu", "--host") else st.sampled_from(options[option]))
        if option in words:
            words[words.index(option) + 1] = value
        else:
            words += [option, value]
    return words


def impossible_options(words: list[str]):
    """A check of a result: none of --gpus, --ram-gib, --model-gib, --slot-gen, --slot-lanes, --gpu-gib was zero,
    negative or not finite (each is a count or a size; taking one as "not given" is taking it as data)."""
    given_values = dict(zip(words[::2], words[1::2], strict=False))

    def check(out) -> list[str]:
        found = []
        for option in ("--gpus", "--ram-gib", "--model-gib", "--slot-gen", "--slot-lanes", "--gpu-gib"):
            try:
                value = float(given_values.get(option, "1"))
            except ValueError:
                continue
            if not value > 0 or value == float("inf"):
                found.append(f"{option} {given_values[option]} taken (a result)")
        return found

    return check


@fuzz(200)
@given(words=machine_options(), line=st.sampled_from(["llama-server -m x.gguf -ngl 99 -c 4096",
                                                      "llama-bench -m x.gguf -ncmoe 10,20 -p 64 -n 16",
                                                      "llama-cli -m x.gguf -ngl 20 -np 2", "llama-server -ngl auto"]),
       out=st.sampled_from(["", "--json", "--write"]))
def test_llama_machine_options_are_taken_or_refused_in_one_line(words, line, out, tmp_path_factory):
    """--gpus, --ram-gib, --slot-gen, --model-gib, ... at zero, negative, huge, non-finite and absurd values."""
    args = ["llama", line, *words]
    if out == "--write":
        args += ["--write", str(tmp_path_factory.mktemp("w") / "s.yaml")]
    elif out:
        args.append(out)
    invoke("llama", args, check=impossible_options(words))


SPECIAL = ["/dev/zero", "/dev/null", "/tmp", "/nonexistent/model.gguf", "fifo", "a\0b.gguf", "link", "empty.json"]


@fuzz(16)
@given(which=st.sampled_from(SPECIAL), how=st.sampled_from(["model", "llama", "advise"]))
def test_special_files_as_model_files_are_refused_in_one_line(which, how, tmp_path_factory):
    """A device, a FIFO, a folder, a missing file, a NUL in the name, a dangling link given as the model."""
    folder = tmp_path_factory.mktemp("s")
    file = which
    if which == "fifo":
        file = str(folder / "model.gguf")
        os.mkfifo(file)
    elif which == "link":
        file = str(folder / "model.json")
        os.symlink(str(folder / "gone.json"), file)
    elif which == "empty.json":
        file = str(folder / which)
        open(file, "w").close()
    box = ["--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x"]
    args = {"model": ["model", file], "llama": ["llama", "llama-server -ngl 99", "--model", file, "--quant", "Q4_K_M",
                                                *box],
            "advise": ["advise", "--model", file, "--quant", "Q4_K_M", *box, "--top", "1", "--ubatch", "512"]}
    invoke(how, args[how], note=f"the model file is {which}")


BENCH_RANGES = ["0-47", "0-99", "0-4095", "1-4096", "0-63", "512,1024,2048", "1-8192*2", "128-8192+128"]


@fuzz(8)
@given(flags=st.lists(st.sampled_from(["-ncmoe", "-ub", "-p", "-n", "-ngl", "-d", "-t"]), min_size=1, max_size=2,
                      unique=True), data=st.data())
def test_llama_bench_sweeps_run_in_bounded_time_or_are_refused(flags, data):
    """A llama-bench line sweeping one or two flags over up to the 4,096 values a flag may take (llama-bench runs
    every combination): the run within the cap, or the sweep refused as too large."""
    sweep = " ".join(f"{flag} {data.draw(st.sampled_from(BENCH_RANGES))}" for flag in flags)
    invoke("llama", ["llama", f"llama-bench -m x.gguf {sweep}", "--model", QWEN, "--quant", "Q4_K_M", "--gpu",
                     "rtx4090", "--host", "ryzen9_7950x", "--json"])


# --- sim advise -------------------------------------------------------------------------------------------------------

LISTS = ["1", "1,2", "1,2,4,8", "0", "-1", "", ",", "1,,2", "x", "1.5", "99999", ",".join(map(str, range(1, 200))),
         ",".join(["1"] * 5000), "1..4", "4096", "1;2"]
ANCHORS = ["n_cpu_moe=30:tg=25.3,pp=150", "n_cpu_moe=30:tg=25.3", "n_cpu_moe=30:pp=1e308", "n_cpu_moe=30:tg=inf",
           "n_cpu_moe=30:tg=nan", "n_cpu_moe=30:tg=0", "n_cpu_moe=30:tg=-5", "n_gpu_layers=99:tg=40",
           "ubatch_size=512:pp=1000", "bogus", ":", "n_cpu_moe=x:tg=1", "n_cpu_moe=30:", ":tg=1", "n_cpu_moe=30:zz=1",
           "n_cpu_moe=999999:tg=1", "n_cpu_moe=30,n_cpu_moe=31:tg=1", "cache_type_k=q8_0:tg=30", "a=b=c:tg=1",
           "n_cpu_moe=30:tg=1e-320", "n_cpu_moe=-1:tg=10", "n_cpu_moe=30:tg=25:pp=3"]
ADVISE_VALUES = {"--prompt": ["512", "1", "0", "-1", "65536", "1000000"], "--gen": ["128", "1", "0", "-1", "100000"],
                 "--depth": ["0", "4096", "-1", "8192", "1000000"], "--ctx": ["8192", "0", "-1", "512", "1", "262144"],
                 "--parallel": LISTS, "--ubatch": LISTS + ["512,1024,2048"], "--kv": ["f16", "q8_0", "f16,q8_0",
                 "q4_0", "q3_x", "", "f16,f16", "bf16,q4_0,q8_0"], "--anchor": ANCHORS,
                 "--margin-gib": ["0.5", "0", "-1", "1e300", "nan", "16"], "--top": ["1", "0", "-1", "3", "100000"],
                 "--ram-gib": ["64", "0", "-1", "1e300", "nan", "1"], "--model-gib": ["17.28", "0", "-1", "1e300"],
                 "--gpus": ["1", "2", "0", "-1", "8"]}


@fuzz(70)
@given(data=st.data())
def test_advise_options_rank_placements_or_say_why_in_one_line(data):
    """sim advise on a small search (one -ub, one KV type, --top 1 unless fuzzed; a search costs 0.1-0.7 s) with
    its options at odd values: prompt, generation, depth, context, -np lists, anchors, RAM, margins."""
    gpu, host = data.draw(st.sampled_from(MACHINES))
    model = data.draw(st.sampled_from([QWEN, path("calibration", "models", "qwen3-4b.json")]))
    opts = {"--model": model, "--quant": "Q4_K_M", "--gpu": gpu, "--host": host, "--top": "1", "--ubatch": "512",
            "--kv": "f16"}
    for option in data.draw(st.lists(st.sampled_from(sorted(ADVISE_VALUES)), min_size=1, max_size=3, unique=True)):
        opts[option] = data.draw(st.one_of(st.sampled_from(ADVISE_VALUES[option]), number_texts())
                                 if option not in ("--kv", "--anchor") else st.sampled_from(ADVISE_VALUES[option]))
    args = ["advise", *[w for kv in opts.items() for w in kv]]
    if data.draw(st.booleans()):
        args.append("--json")
    invoke("advise", args, check=lambda out: prompt_past_context(opts) + impossible_options(args[1:])(out))


def prompt_past_context(opts: dict[str, str]) -> list[str]:
    """A check of an advice: its request (--depth + --prompt + --gen tokens) fits in --ctx."""
    try:
        need = sum(int(opts.get(k, d)) for k, d in (("--depth", "0"), ("--prompt", "512"), ("--gen", "128")))
        ctx = int(opts.get("--ctx", "8192"))
    except ValueError:
        return []
    return [f"a request of {need:,} tokens advised in a context of {ctx:,}"] if need > ctx else []


# --- sim vllm ---------------------------------------------------------------------------------------------------------

VLLM_FLAGS = {"--max-num-seqs": ["64", "1", "0", "-1", "x", "1e9"], "--max-num-batched-tokens": ["8192", "8k", "2K",
              "0", "99999999999999", "1.5k", "k"], "--gpu-memory-utilization": ["0.9", "0", "1", "1.2", "-0.1", "nan"],
              "--tensor-parallel-size": ["1", "2", "8", "0", "65", "3"], "-tp": ["2", "x"],
              "--pipeline-parallel-size": ["1", "2", "0"], "--data-parallel-size": ["2", "0"],
              "--kv-cache-dtype": ["auto", "fp8", "fp8_e5m2", "int3", ""], "--max-model-len": ["16384", "auto", "-1",
              "0", "1", "10000000", "8k"], "--block-size": ["16", "32", "0", "7", "100000"],
              "--num-gpu-blocks-override": ["1000", "0", "1", "99999999999"], "--dtype": ["half", "bfloat16", "int7"],
              "--quantization": ["awq", "fp8", "gptq", "nonsense"], "-q": ["fp8"], "--speculative-config":
              ['{"method": "ngram", "num_speculative_tokens": 3}', "{oops", "[]", '{"num_speculative_tokens": -1}',
               '{"method": "eagle", "num_speculative_tokens": 100000}', "null", '{"a": ' * 200],
              "--swap-space": ["8", "0", "-1", "1e300"], "--cpu-offload-gb": ["4", "0", "-4", "1000"],
              "--preemption-mode": ["swap", "recompute", "x"], "--scheduling-policy": ["priority", "fcfs", "x"],
              "--enable-prefix-caching": [None, "true", "maybe"], "--no-enable-prefix-caching": [None],
              "--enable-chunked-prefill": [None, "False", "true"], "--enforce-eager": [None], "--port": ["8000"],
              "--host": ["0.0.0.0"], "--frobnicate": ["3", None], "--max-num-seqs=": [None], "--swap-space=": [None],
              "--trust-remote-code": [None]}
SGLANG_FLAGS = {"--tp-size": ["2", "0"], "--tp": ["2", "x"], "--mem-fraction-static": ["0.8", "0", "2"],
                "--max-running-requests": ["128", "0"], "--chunked-prefill-size": ["4096", "-1", "0", "-5"],
                "--max-prefill-tokens": ["16384", "0"], "--context-length": ["8192", "0", "-1"],
                "--schedule-policy": ["lpm", "fcfs", "x"], "--speculative-algorithm": ["EAGLE", "x"],
                "--speculative-num-steps": ["3", "0", "-1"], "--speculative-num-draft-tokens": ["4", "0"],
                "--page-size": ["16", "0"], "--cuda-graph-max-bs": ["64", "0"], "--max-total-tokens": ["100000", "0"],
                "--disable-radix-cache": [None], "--disable-cuda-graph": [None], "--kv-cache-dtype": ["fp8_e4m3"]}
SERVED = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-4B", "unknown/model", "", "./local",
          "meta-llama/Llama-3.2-1B"]


@st.composite
def vllm_lines(draw) -> str:
    """A pasted vLLM or SGLang server line: its program, a model, up to eight flags at odd values."""
    sglang = draw(st.booleans())
    model = draw(st.sampled_from(SERVED))
    program = draw(st.sampled_from(["python -m sglang.launch_server --model-path", "sglang serve --model-path"] if
                                   sglang else ["vllm serve", "python -m vllm.entrypoints.openai.api_server --model",
                                                "VLLM_USE_V1=1 vllm serve", "vllm", "python3.11 -m vllm serve"]))
    table = SGLANG_FLAGS if sglang else VLLM_FLAGS
    words = [program, shlex.quote(model) if model else ""]
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from(sorted(table)))
        values = table[flag]
        value = draw(st.one_of(st.just(values[0]), st.just(values[0]), st.sampled_from(values), number_texts()))
        words += [flag] if value is None else [flag, shlex.quote(value)]
    return draw(st.sampled_from([" ", " \\\n  "])).join(words) + draw(st.sampled_from(["", " 2>&1 | tee x", " '"]))


@fuzz(220)
@given(line=st.one_of(vllm_lines(), st.text(max_size=60)), gpu=st.sampled_from(["a100_80gb_sxm", "h100_sxm",
       "rtx4090", "t4", "nope"]), how=st.sampled_from(["run", "write", "write", "json"]),
       gpus=st.sampled_from([None, None, "1", "2", "8", "64"]))
def test_pasted_vllm_lines_run_or_are_refused_in_one_line(line, gpu, how, gpus, tmp_path_factory):
    """vLLM and SGLang lines at odd flag values, on a catalog GPU: run with few requests, written, or as JSON."""
    args = ["vllm", line, "--gpu", gpu, "--requests", "5", "--prompt", "200", "--gen", "20"]
    if gpus:
        args += ["--gpus", gpus]
    if how == "write":
        args += ["--write", str(tmp_path_factory.mktemp("v") / "s.yaml"), "--no-run"]
    elif how == "json":
        args.append("--json")
    invoke("vllm", args)


# --- sim compare --vs, sim catalog, sim capacity --goal ---------------------------------------------------------------

VS_PATHS = ["seed", "serve.requests", "machines.rtx4090_box.gpus.gpu0.reserved_gib", "machines.mac.page_cache_gib",
            "jobs", "name", "machines.nope.x", "disks", "loading.chunk_mib", "", " ", "a..b", "machines[0]",
            "machines.rtx4090_box.disk"]
VS_VALUES = ["3", "0", "-1", "1e300", "nan", "null", "[]", "{}", "'", "[1,", "5" * 5000, "!!float abc", "x", ""]


@st.composite
def variants(draw) -> str:
    """A --vs variant: an optional name (baseline, empty, long, with colons), then changes separated by ';'."""
    changes = [f"{draw(st.sampled_from(VS_PATHS))}{draw(st.sampled_from(['=', '=', '==', ' = ', '']))}"
               f"{draw(st.one_of(st.sampled_from(VS_VALUES), st.text(max_size=8)))}"
               for _ in range(draw(st.integers(1, 3)))]
    name = draw(st.sampled_from(["", "", "A: ", "baseline: ", ": ", "x" * 300 + ": ", "a:b: ", "variant 2: "]))
    text = name + draw(st.sampled_from(["; ", ";", " ; "])).join(changes)
    return draw(st.sampled_from([text, text, "scenarios/home_lab.yaml", "/nonexistent.yaml", ""]))


@fuzz(110)
@given(vs=st.lists(variants(), min_size=1, max_size=3), json_out=st.booleans(),
       markdown=st.booleans())
def test_compare_variants_compare_or_are_refused_in_one_line(vs, json_out, markdown):
    """compare SCENARIO --vs with named, duplicated, empty, malformed and absurd variants (home_lab: 20 ms a run)."""
    args = ["compare", path("scenarios", "home_lab.yaml"), *[w for v in vs for w in ("--vs", v)]]
    args += ["--json"] if json_out else ["--markdown"] if markdown else []
    invoke("compare", args)


@fuzz(160)
@given(name=st.one_of(st.sampled_from(["rtx4090", "RTX4090", "ryzen9_7950x", "pcie4", "nvlink_a100", "", " ",
                                       "x" * 10000, "rtx", "a100", "../gpus", "rtx4090\0", "%s", "{gpus}", "\u00e9"]),
                      st.text(max_size=40)),
       kind=st.sampled_from([None, "gpus", "hosts", "links", "GPUS", "", "nics"]), json_out=st.booleans(),
       named=st.booleans())
def test_catalog_names_and_kinds_are_shown_or_refused_in_one_line(name, kind, json_out, named):
    """catalog NAME and --kind: ids, near misses, empty, 10,000 characters, format strings, NUL, any text."""
    args = ["catalog"] + ([name] if named else []) + (["--kind", kind] if kind is not None else [])
    invoke("catalog", args + (["--json"] if json_out else []))


GOAL_KEYS = ["ttft_p99", "tpot_p99", "e2e_p50", "queue_wait_max", "ttft_mean", "tpot_p90", "rejected_share"]
ODD_KEYS = ["ttft", "rejected", "decode_p99", "ttft_p100", "ttft_p0", "TTFT_P99", "", "e2e_p99.9", "ttft_p99_p99"]
GOAL_BOUNDS = ["1s", "50ms", "2s", "0.01", "1", "0", "-1s", "nan", "inf", "1e300s", "1e-320s", "1us", "1h", "1 s",
               "5" * 5000 + "s", "s", "1ss", "0.5%", "1e3ms", "1e-3", "2e6us"]


@st.composite
def goals(draw) -> str:
    """A --goal: mostly well formed (a statistic, < or <=, a bound with a unit), sometimes odd in one part."""
    key = draw(st.one_of(st.sampled_from(GOAL_KEYS), st.sampled_from(GOAL_KEYS), st.sampled_from(ODD_KEYS)))
    op = draw(st.sampled_from(["<", "<", "<", "<=", ">", "=", "<<", "", " < "]))
    bound = draw(st.one_of(st.sampled_from(["1s", "2s", "500ms", "0.5"]), st.sampled_from(GOAL_BOUNDS),
                           number_texts()))
    return key + op + bound


CAPACITY = ["--seeds", "1", "--rtol", "0.5", "--set", "serve.requests=8", "--set", "serve.workload.runs=1", "--set",
            "serve.workload.clients=2", "--json"]


@fuzz(50)
@given(goal_list=st.lists(st.one_of(goals(), goals(), st.text(max_size=20)), min_size=1, max_size=2),
       load=st.sampled_from([None, None, None, "rate", "clients"]))
def test_capacity_goals_are_searched_or_refused_in_one_line(goal_list, load):
    """capacity --goal strings on a closed loop of two clients, eight requests, one seed, bisected to 50% (a search
    costs 0.3-0.5 s when the goals parse)."""
    args = ["capacity", path("scenarios", "gen3_5090_concurrency.yaml"),
            *[w for g in goal_list for w in ("--goal", g)], *CAPACITY]
    invoke("capacity", args + (["--load", load] if load else []))


# --- a bounded sample: the whole peak memory of a child process -------------------------------------------------------

@fuzz(10)
@given(data=st.data())
def test_a_sample_of_command_cases_is_bounded_in_a_child_process(data, tmp_path_factory):
    """A few cases of the strategies above again in a child (python -m sim, 1 GiB of address space, killed at the
    hard cap): its whole peak RSS within 200 MiB and its time within 5 s. Arguments without NUL bytes (an argv
    cannot hold one)."""
    kind = data.draw(st.sampled_from(["llama", "llama", "vllm", "advise", "catalog", "compare", "capacity"]))
    if kind == "llama":
        args = ["llama", data.draw(llama_lines()), *machine(data.draw), "--write", "/dev/null"]
    elif kind == "vllm":
        args = ["vllm", data.draw(vllm_lines()), "--gpu", "a100_80gb_sxm", "--requests", "5", "--write",
                str(tmp_path_factory.mktemp("v") / "s.yaml"), "--no-run"]
    elif kind == "advise":
        args = ["advise", "--model", QWEN, "--quant", "Q4_K_M", "--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x",
                "--top", "1", "--ubatch", "512", "--kv", "f16", "--anchor", data.draw(st.sampled_from(ANCHORS))]
    elif kind == "catalog":
        args = ["catalog", data.draw(st.text(max_size=40)), "--json"]
    elif kind == "compare":
        args = ["compare", path("scenarios", "home_lab.yaml"), "--vs", data.draw(variants())]
    else:
        args = ["capacity", path("scenarios", "gen3_5090_concurrency.yaml"), "--goal", data.draw(goals()), *CAPACITY]
    bounded(kind, [a.replace("\0", "") for a in args])
