"""Pasted llama-batched-bench command lines: the settings and tests they give (llama.cpp's common/arg.cpp,
LLAMA_EXAMPLE_BENCH: -npp, -ntg, -npl, -pps, -tgs, -kvu), their errors (one ScenarioError line naming the flag), and
to_command's flags reading back to the same settings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.errors import ScenarioError
from sim.llamacpp import cmdline
from sim.llamacpp.cmdline import parse_command, to_command
from sim.llamacpp.cmdline_batched import batched_tests

# batched-bench.cpp's own usage line
USAGE = ("llama-batched-bench -m model.gguf -c 2048 -b 2048 -ub 512 -npp 128,256,512 -ntg 128,256 -npl 1,2,4,8,16,32 "
         "-pps")


def test_the_tools_usage_line():
    cmd = parse_command(USAGE)
    assert cmd.program == "llama-batched-bench" and cmd.model_path == "model.gguf"
    assert cmd.settings == {"ctx_size": 2048, "batch_size": 2048, "ubatch_size": 512}
    assert cmd.bench == {"n_pp": [128, 256, 512], "n_tg": [128, 256], "n_pl": [1, 2, 4, 8, 16, 32],
                         "is_pp_shared": True, "is_tg_separate": False}
    assert cmd.unknown == [] and cmd.ignored == [] and cmd.sweeps == {}
    tests = batched_tests(cmd.bench)  # for pp, for tg, for pl, as the tool loops
    assert len(tests) == 36 and tests[:7] == [(128, 128, 1), (128, 128, 2), (128, 128, 4), (128, 128, 8),
                                              (128, 128, 16), (128, 128, 32), (128, 256, 1)]
    assert tests[-1] == (512, 256, 32)


def test_the_flags_the_tool_shares_with_the_server_and_its_own():
    cmd = parse_command("CUDA_VISIBLE_DEVICES=0 ./build/bin/llama-batched-bench -m /m/gpt-oss-20b.gguf -c 270336 "
                        "-b 2048 -ub 2048 -npp 512,4096,8192 -ntg 32 -npl 1,2,4,8,16,32 -ngl 99 -fa 1 -kvu "
                        "--n-cpu-moe 4 -ctk q8_0 -t 20 -np 4 --output-format jsonl -npp 16384 --no-warmup -tgs 2>&1")
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "0"} and cmd.model_path == "/m/gpt-oss-20b.gguf"
    assert cmd.settings == {"ctx_size": 270336, "batch_size": 2048, "ubatch_size": 2048, "n_gpu_layers": 99,
                            "flash_attn": True, "kv_unified": True, "n_cpu_moe": 4, "cache_type_k": "q8_0",
                            "threads": 20, "parallel": 4}
    assert cmd.bench["n_pp"] == [512, 4096, 8192, 16384]  # a repeated -npp appends, as params.n_pp.insert does
    assert cmd.bench["is_tg_separate"] is True and cmd.bench["is_pp_shared"] is False
    assert cmd.ignored == ["--output-format jsonl", "--no-warmup", "2>&1"]


@pytest.mark.parametrize(("line", "expected"), [
    ("batched-bench -m m.gguf", {"n_pp": [], "n_tg": [], "n_pl": [], "is_pp_shared": False, "is_tg_separate": False}),
    (r"C:\llama\llama-batched-bench.exe -m C:\m.gguf -npp 1 -ntg 0 -npl 3",
     {"n_pp": [1], "n_tg": [0], "n_pl": [3], "is_pp_shared": False, "is_tg_separate": False}),
    ("$ llama-batched-bench -npl 4 -npl 8,16 -pps",
     {"n_pp": [], "n_tg": [], "n_pl": [4, 8, 16], "is_pp_shared": True, "is_tg_separate": False})])
def test_names_and_defaults(line, expected):
    """Without -npp / -ntg / -npl the lists are empty (the tool then runs no test)."""
    assert parse_command(line).bench == expected


@pytest.mark.parametrize(("flags", "expected"), [
    ("-kvu", True), ("--kv-unified", True), ("-no-kvu", False), ("--no-kv-unified", False), ("-kvu -no-kvu", False)])
def test_unified_kv(flags, expected):
    assert parse_command(f"llama-batched-bench {flags}").settings == {"kv_unified": expected}


@pytest.mark.parametrize(("line", "flag", "problem"), [
    ("llama-batched-bench -npp", "-npp", "expected a value after -npp"),
    ("llama-batched-bench -npp 128-512", "-npp", "expected an integer, got '128-512'"),  # no ranges
    ("llama-batched-bench -ntg 1,,2", "-ntg", "expected a comma list without empty values"),
    ("llama-batched-bench -ntg -5", "-ntg", "expected an integer >= 0, got -5"),
    ("llama-batched-bench -npl 0,1", "-npl", "expected parallel sequences >= 1, got 0"),
    ("llama-batched-bench -npp x", "-npp", "expected an integer, got 'x'"),
    ("llama-batched-bench -pps=1", "-pps", "expected no value after -pps"),
    ("llama-batched-bench -npp 1,2,3,4,5,6,7,8 -ntg 1,2,3,4,5,6,7,8 -npl " + ",".join(["1"] * 65), "-npl",
     "expected at most 4096 tests (-npp x -ntg x -npl values), got 4160"),
    ("llama-batched-bench -c many", "-c", "expected an integer, got 'many'")])
def test_errors_name_the_flag(line, flag, problem):
    with pytest.raises(ScenarioError) as caught:
        parse_command(line)
    error = caught.value
    assert error.source == "command line" and error.path == flag and problem in error.problem
    assert "\n" not in str(error)


def test_an_unknown_program_names_this_one():
    with pytest.raises(ScenarioError, match="llama-batched-bench"):
        parse_command("llama-bogus-bench -m m.gguf")


SETTINGS = st.fixed_dictionaries({}, optional={
    "n_gpu_layers": st.integers(-1, 999), "n_cpu_moe": st.integers(0, 99), "ctx_size": st.integers(0, 2**31 - 1),
    "batch_size": st.integers(1, 65536), "ubatch_size": st.integers(1, 65536), "threads": st.integers(1, 256),
    "flash_attn": st.sampled_from([True, False, "auto"]), "cache_type_k": st.sampled_from(["f16", "q8_0", "q4_0"]),
    "mmap": st.booleans(), "override_tensor": st.lists(st.sampled_from(["exps=CPU", "blk\\.[0-9]{1,2}\\.ffn=CPU"]),
                                                       min_size=1, max_size=3)})


@settings(max_examples=60)
@given(SETTINGS, st.lists(st.integers(0, 9999), max_size=4), st.lists(st.integers(1, 64), max_size=4))
def test_round_trip(given_settings, pps, pls):
    line = to_command(given_settings, "llama-batched-bench", "/models/a b.gguf")
    line += (" -npp " + ",".join(map(str, pps))) * bool(pps) + (" -npl " + ",".join(map(str, pls))) * bool(pls)
    cmd = parse_command(line)
    assert cmd.settings == given_settings and cmd.model_path == "/models/a b.gguf"
    assert cmd.bench["n_pp"] == pps and cmd.bench["n_pl"] == pls and cmd.unknown == [] and cmd.ignored == []


TOKENS = st.sampled_from(["-npp", "-ntg", "-npl", "-pps", "-tgs", "-kvu", "-no-kvu", "--output-format", "-c", "-ngl",
                          "1", "0", "-1", "1,2", "1,,2", "1-8", "jsonl", "x", "'", '"', "\\", "|", "#", ",", "\n",
                          "9" * 30])


@settings(max_examples=150)
@given(st.lists(TOKENS | st.text(max_size=6), max_size=14))
def test_any_line_parses_or_raises_one_scenario_error(words):
    try:
        cmd = parse_command(" ".join(["llama-batched-bench", *words]))
    except ScenarioError as error:
        assert "\n" not in str(error)
        return
    assert cmd.program == "llama-batched-bench"
    b = cmd.bench
    assert all(isinstance(n, int) and 0 <= n <= cmdline.INT32_MAX for n in b["n_pp"] + b["n_tg"])
    assert all(n >= 1 for n in b["n_pl"]) and len(batched_tests(b)) <= cmdline.MAX_VALUES
    assert isinstance(b["is_pp_shared"], bool) and isinstance(b["is_tg_separate"], bool)
