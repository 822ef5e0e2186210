"""``sim llama`` and ``sim advise`` bounded and honest (issue 31): a test that cannot load is null in JSON with its
reason, measured rates and token options in range, card counts, lists and searches capped, ``-ot`` regexes matched
in linear time, and ``0`` never taken as "not given". One bounded child run (tests.bounded: exit 2 with one line,
within 5 s and 200 MiB) per defect; the variants run in-process through click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sim.cli import main
from sim.config import llamacpp as config
from sim.config.llamacpp import parse_rules
from sim.core.errors import ScenarioError
from tests.bounded import Outcome, run_bounded

QWEN = "calibration/models/qwen3-30b-a3b.json"
MACHINE = ["--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x", "--model", QWEN, "--quant", "Q4_K_M"]
SCENARIO = "scenarios/llamacpp_3070ti.yaml"
SECONDS = 5.0  # every reproducer answers within this (s) ...
PEAK_MIB = 200.0  # ... holding at most this (MiB)


def _bounded(args: list[str]) -> Outcome:
    r = run_bounded(args, timeout_s=30.0, memory_mib=2048)
    report = f"exit {r.code} in {r.seconds:.2f} s, peak {r.peak_mib:.0f} MiB: {r.stderr.strip()[-600:]}"
    assert r.seconds < SECONDS, f"took too long; {report}"
    assert r.peak_mib < PEAK_MIB, f"held too much memory; {report}"
    return r


def _refused(args: list[str], *needles: str) -> Outcome:
    """``sim ARGS`` in a bounded child: exit 2, one ``sim: error:`` line holding every needle, in time and memory."""
    r = _bounded(args)
    assert r.one_line_error(), f"exit {r.code}: {r.stderr.strip()[-600:]}"
    for needle in needles:
        assert needle in r.stderr, f"{needle!r} not in {r.stderr!r}"
    return r


def _invoke_refused(args: list[str], *needles: str) -> str:
    """``sim ARGS`` in-process: exit 2 and one ``sim: error:`` line holding every needle."""
    result = CliRunner().invoke(main, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("sim: error: "), \
        (result.exit_code, result.stderr, result.stdout[-300:])
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


# 1. a test that cannot load: null values and the reason in JSON, as the text says "n/a" and why ------------------

def test_llama_json_of_a_test_that_cannot_load_is_null_with_its_reason() -> None:
    r = _bounded(["llama", "llama-server -ngl 99", *MACHINE, "--json"])  # every layer asked for: the fit stops
    assert r.code == 0, r.stderr[-600:]
    doc = json.loads(r.stdout)
    rows = doc["bench"]
    assert [row["test"] for row in rows] == ["pp512", "tg128"]
    for row in rows:  # 17.9 GiB on a 16 GiB card: llama.cpp cannot load it
        assert row["tok_s"] is None and row["seconds"] is None and row["vram_gib"] is None
        assert "cannot load" in row["error"] and "out of memory" in row["error"]


def test_llama_json_of_swept_tests_that_cannot_load() -> None:
    result = CliRunner().invoke(main, ["llama", "llama-bench -ngl 99 -ub 512,1024", *MACHINE, "--json"])
    assert result.exit_code == 0, result.output[-600:]
    docs = json.loads(result.stdout)
    assert [d["sweep"] for d in docs] == [{"ubatch_size": 512}, {"ubatch_size": 1024}]
    assert all(row["tok_s"] is None and row["error"] for d in docs for row in d["bench"])


# 2. an anchor's rates are measurements: a token rate (sim.formats.quantities.TOKENS_PER_S) -------------------------

def test_anchor_rate_beyond_any_machine_is_refused() -> None:
    _refused(["advise", *MACHINE, "--anchor", "n_cpu_moe=30:pp=1e308"], "--anchor", "pp", "tok/s")


@pytest.mark.parametrize("rates", ["pp=1e308", "tg=2e7", "pp=inf", "tg=nan", "pp=0", "tg=-1"])
@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_anchor_rates_out_of_range(rates: str, as_json: list[str]) -> None:
    _invoke_refused(["advise", *MACHINE, "--anchor", f"n_cpu_moe=30:{rates}", *as_json], "--anchor",
                    "a token rate above 0 and at most 10,000,000 tok/s")


def test_an_empty_anchor_is_refused_not_taken_as_none() -> None:
    _invoke_refused(["advise", *MACHINE, "--anchor", ""], "--anchor", "KEY=VALUE")


# 3. the number of cards: at most llama.cpp's GGML_CUDA_MAX_DEVICES (16) ------------------------------------------

def test_billions_of_cards_are_refused() -> None:
    _refused(["llama", "llama-server", *MACHINE, "--gpus", "9999999999"], "--gpus", "16")


@pytest.mark.parametrize("command", [["llama", "llama-server"], ["advise"]])
@pytest.mark.parametrize("gpus", ["99999", "17", "-1"])
def test_card_counts_out_of_range(command: list[str], gpus: str) -> None:
    _invoke_refused([*command, *MACHINE, "--gpus", gpus], "--gpus", "0 to 16")


# 4. -ot regexes in linear time (RE2); what RE2 cannot compile is a one-line error --------------------------------

def test_catastrophic_override_regex_on_a_pasted_line_runs_in_linear_time() -> None:
    r = _bounded(["llama", "llama-server -ngl 0 -ot '(.|.)*Z=CPU'", *MACHINE])
    assert r.code == 0, r.stderr[-600:]
    assert "pp512" in r.stdout and "tg128" in r.stdout


def test_catastrophic_override_regex_through_set_runs_in_linear_time() -> None:
    r = _bounded(["run", SCENARIO, "--json", "--set",
                  "machines.box.engine.llamacpp.override_tensor=['(.|.)*Z=CPU', '((a*)*)*$=CPU']"])
    assert r.code == 0, r.stderr[-600:]
    assert json.loads(r.stdout)["metrics"]["decode_tok_s"] > 0


@pytest.mark.parametrize(("rule", "why"), [(r"(exps)\1=CPU", "backreference"), (r"exps(?=\.weight)=CPU", "lookaround"),
                                           (r"blk\.[=CPU", "missing ]"), ("x{5000}=CPU", "repetition")])
def test_a_regex_re2_cannot_compile_is_a_one_line_error(rule: str, why: str) -> None:
    with pytest.raises(ScenarioError, match="RE2") as info:
        parse_rules([rule], "command line", "override_tensor", ("CUDA0",))
    assert "\n" not in str(info.value) and why in str(info.value)


def test_a_regex_re2_cannot_compile_through_the_command_line() -> None:
    _invoke_refused(["llama", r"llama-server -ngl 0 -ot '(exps)\1=CPU'", *MACHINE], "override_tensor", "RE2")


def test_override_rules_search_anywhere_in_the_name_as_std_regex_search() -> None:
    rules = parse_rules([r"ffn_.*_exps=CPU", r"^blk\.1\.=CUDA0", r"weight$=cuda0"], "s", "ot", ("CUDA0",))
    found = [next((dev for pattern, dev in rules if pattern.search(name)), None) for name in
             ("blk.12.ffn_up_exps.weight", "blk.1.attn_q.weight", "blk.11.attn_q.bias", "xblk.1.attn_q.bias")]
    assert found == ["CPU", "CUDA0", None, None]
    assert rules[2][0].search("output.weight") and not rules[2][0].search("output.weight.x")


# 5. advise's token options: bounded, and the request fits the context -------------------------------------------

def test_a_prompt_beyond_the_context_is_refused() -> None:
    _refused(["advise", *MACHINE, "--prompt", "999999999999"], "--prompt", "--ctx", "8192")


@pytest.mark.parametrize(("options", "needles"), [
    (["--prompt", "8000", "--gen", "193"], ("--prompt", "--gen", "8192")),  # 8,193 tokens in 8,192 cells
    (["--depth", "8000", "--prompt", "100", "--gen", "100"], ("--depth", "8,200", "8192")),
    (["--gen", "999999999999"], ("--gen", "--ctx")),
    (["--ctx", "999999999999"], ("--ctx", "10,000,000")),
    (["--ctx", "0"], ("--ctx",)),
    (["--prompt", "0"], ("--prompt",)),
    (["--depth", "-1"], ("--depth",)),
])
def test_advise_token_options_out_of_range(options: list[str], needles: tuple[str, ...]) -> None:
    _invoke_refused(["advise", *MACHINE, *options], *needles)


def test_a_request_that_just_fits_the_context_runs() -> None:
    result = CliRunner().invoke(main, ["advise", *MACHINE, "--prompt", "1000", "--gen", "24", "--ctx", "1024",
                                       "--ubatch", "512", "--kv", "q8_0", "--json"])
    assert result.exit_code == 0, result.output[-600:]
    assert json.loads(result.stdout)["ctx"] == 1024


# 6. advise's searched lists: a bounded number of values, each in the engine's range ------------------------------

def test_a_thousand_parallel_values_are_refused() -> None:
    _refused(["advise", *MACHINE, "--parallel", ",".join(str(i) for i in range(1, 1001))], "--parallel", "16")


@pytest.mark.parametrize(("options", "needles"), [
    (["--parallel", ",".join(["1"] * 10_000)], ("--parallel", "at most 16 values")),
    (["--parallel", "5000"], ("--parallel", "1,024")),
    (["--ubatch", ",".join(str(i) for i in range(1, 100))], ("--ubatch", "at most 16 values")),
    (["--ubatch", "999999999"], ("--ubatch", "1,000,000")),
    (["--kv", ",".join(["f16"] * 100)], ("--kv", "at most 16 values")),
    (["--parallel", "1,2,3,4,5,6,7,8", "--ubatch", "64,128,256,512,1024", "--kv", "f16,q8_0"],
     ("--parallel", "--ubatch", "--kv", "80", "64")),
    (["--top", "0"], ("--top",)),
    (["--margin-gib", "1e300"], ("--margin-gib", "GiB")),
])
def test_advise_search_options_out_of_range(options: list[str], needles: tuple[str, ...]) -> None:
    _invoke_refused(["advise", *MACHINE, *options], *needles)


# 7. a scenario's bench lists: the command line's cap, from one definition ---------------------------------------

def test_a_scenario_bench_list_of_5000_values_is_refused() -> None:
    depths = "[" + ",".join(["0"] * 5000) + "]"
    _refused(["run", SCENARIO, "--set", f"bench.n_depth={depths}"], "bench.n_depth", "4,096")


def test_the_bench_cap_is_the_command_lines() -> None:
    from sim.llamacpp import cmdline

    assert cmdline.MAX_VALUES is config.MAX_BENCH_VALUES == 4096 and config.MAX_BENCH_TESTS == 512


@pytest.mark.parametrize(("key", "value"), [("n_prompt", "[" + ",".join(["512"] * 4097) + "]"),
                                            ("n_gen", "[" + ",".join(["1"] * 4097) + "]")])
def test_scenario_bench_lists_beyond_the_cap(key: str, value: str) -> None:
    _invoke_refused(["run", SCENARIO, "--set", f"bench.{key}={value}"], f"bench.{key}", "4,096")


def test_scenario_bench_tests_beyond_the_cap() -> None:
    prompts = "[" + ",".join(str(i) for i in range(1, 201)) + "]"
    depths = "[" + ",".join(str(i) for i in range(0, 41)) + "]"  # (200 + 1) x 41 = 8,241 tests
    _invoke_refused(["run", SCENARIO, "--set", f"bench.n_prompt={prompts}", "--set", f"bench.n_depth={depths}"],
                    "bench", "8,241 tests", "512")


def test_llama_bench_line_tests_beyond_the_cap() -> None:
    _invoke_refused(["llama", "llama-bench -ngl 0 -p 1-64 -n 1-64 -d 0-64", *MACHINE], "bench", "8,320 tests",
                    "512")


def test_llama_bench_sweeps_times_tests_beyond_the_cap() -> None:
    _invoke_refused(["llama", "llama-bench -ngl 0 -ub 1-2000 -b 1-3", *MACHINE], "-ub", "-b", "12,000 tests",
                    "512")


def test_a_long_prompt_in_ubatches_of_one_token_is_bounded() -> None:
    r = _bounded(["llama", "llama-bench -ngl 0 -p 10000000 -n 0 -ub 1", *MACHINE, "--json"])
    assert r.code == 0, r.stderr[-600:]
    row = json.loads(r.stdout)["bench"][0]
    assert row["test"] == "pp10000000" and row["tok_s"] > 0
    parts = sum(row[k] for k in ("gpu_s", "cpu_s", "link_s", "split_s", "fixed_s"))
    assert parts == pytest.approx(row["seconds"], rel=1e-6)


# 8. 0 is a value, never "not given" ------------------------------------------------------------------------------

def test_a_zero_slot_generation_is_refused() -> None:
    _refused(["advise", *MACHINE, "--slot-gen", "0"], "slot_gen", "0")


@pytest.mark.parametrize("command", [["llama", "llama-server"], ["advise"]])
@pytest.mark.parametrize(("option", "needle", "why"), [("--slot-gen", "slot_gen", "bad value 0"),
                                                        ("--ram-gib", "--ram-gib", "got 0"),
                                                        ("--model-gib", "--model-gib", "got 0")])
def test_zero_machine_options_are_refused(command: list[str], option: str, needle: str, why: str) -> None:
    _invoke_refused([*command, *MACHINE, option, "0"], needle, why)


def test_zero_cards_is_a_cpu_only_machine() -> None:
    result = CliRunner().invoke(main, ["advise", *MACHINE, "--gpus", "0", "--parallel", "1", "--ubatch", "512",
                                       "--kv", "f16", "--json"])
    assert result.exit_code == 0, result.output[-600:]
    assert "no GPU" in json.loads(result.stdout)["machine"]


# the same classes of defect in the other options ---------------------------------------------------------------

def test_an_n_cpu_moe_beyond_the_layers_is_bounded() -> None:
    """--n-cpu-moe 100000 stood for a regex of 100,000 alternatives searched in every tensor name (14 s)."""
    r = _bounded(["llama", "llama-server -ngl 99 -ncmoe 100000", *MACHINE])
    assert r.code == 0 and "tg128" in r.stdout, r.stderr[-600:]
    same = CliRunner().invoke(main, ["llama", "llama-server -ngl 99 -ncmoe 48", *MACHINE])
    assert same.exit_code == 0 and same.stdout.replace("48", "100000") == r.stdout.replace("48", "100000")


@pytest.mark.parametrize(("args", "needles"), [
    (["llama", "llama-server -ngl 0 -ot " + ",".join(f"q{i}=CPU" for i in range(1025)), *MACHINE],
     ("override_tensor", "1,025 rules", "1,024")),
    (["llama", "llama-server -ngl 99 -ts 1e308,1e308", *MACHINE, "--gpus", "2"], ("tensor_split", "1e+15")),
    (["advise", *MACHINE[:-1], ""], ("--quant", "a quantization")),
    (["advise", *MACHINE[:-1], ","], ("--quant", "a quantization")),
    (["llama", "llama-server", *MACHINE[:-1], ""], ("--quant", "a quantization")),
    (["llama", "llama-server", *MACHINE[:-1], "Q4_K_M,Q8_0"], ("--quant", "at most 1 quantization")),
    (["advise", *MACHINE, "--anchor", "n_cpu_moe=30:"], ("--anchor", "rates you measured")),
    (["advise", *MACHINE, "--kv", "x" * 10_000], ("--kv", "...")),
    (["fit-offload", "--max-evaluations", "0", "--out", "/nonexistent/never.yaml"], ("--max-evaluations", "1,000")),
    (["fit-offload", "--max-evaluations", "1000000"], ("--max-evaluations", "1,000")),
])
def test_other_options_out_of_range(args: list[str], needles: tuple[str, ...]) -> None:
    line = _invoke_refused(args, *needles)
    assert len(line) < 300, line


@pytest.mark.parametrize("command", [["llama", "llama-server"], ["advise"]])
def test_a_nul_byte_in_the_model_path_is_a_one_line_error(command: list[str]) -> None:
    """click.Path's os.stat raised ValueError (exit 70) on a NUL byte; the model file's own checks name it."""
    _invoke_refused([*command, "--model", "a\0b.json", "--quant", "Q8_0", "--gpu", "rtx4090", "--host",
                     "ryzen9_7950x"], "a\\x00b.json")
