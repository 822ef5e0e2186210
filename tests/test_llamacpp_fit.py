"""llama.cpp's defaults by build (sim.llamacpp.builds) and its --fit (sim.llamacpp.fit), as sim llama reads a
pasted line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.cli.llama_cmd import command_settings
from sim.core.units import GIB
from sim.llamacpp.builds import CHANGES, CURRENT_BUILD, defaults, parse_build
from sim.llamacpp.cmdline import parse_command
from sim.llamacpp.fit import resolve
from sim.llamacpp.machine import MachineSpec, build_scenario, scenario_dict
from sim.llamacpp.setup import setup_llamacpp

QWEN = "calibration/models/qwen3-30b-a3b.json"


@pytest.mark.parametrize("program, key, before, since, old, new", [
    ("llama-server", "n_gpu_layers", 6324, 6325, 0, 999),
    ("llama-server", "flash_attn", 6324, 6325, False, "auto"),
    ("llama-server", "fit", 7406, 7410, False, True),
    ("llama-cli", "n_gpu_layers", 7406, 7410, 999, -1),
    ("llama-server", "explicit_np_kept", 7432, 7433, False, True),
    ("llama-bench", "flash_attn", 9436, 9437, False, "auto"),
])
def test_each_default_changes_at_its_build(program, key, before, since, old, new):
    assert defaults(program, before).values[key] == old
    assert defaults(program, since).values[key] == new


def test_every_change_names_its_pull_request_and_the_current_build_is_the_default():
    assert all(c.pr.startswith("https://github.com/ggml-org/llama.cpp/pull/") and c.since <= CURRENT_BUILD
               for c in CHANGES)
    assert defaults("llama-server").build == CURRENT_BUILD
    assert defaults("llama-server", 8000).notes  # between b7539 and the first known with PR 19070: said so


@pytest.mark.parametrize("text, build", [("version: 7410 (abcdef01)", 7410), ("build: 1a2b3c4d (6795)", 6795),
                                         ("llama-server b7433 -m x.gguf", 7433), ("llama-server -m x.gguf", None)])
def test_a_build_number_is_read_from_a_version_line_or_bench_output(text, build):
    assert parse_build(text) == build


def test_a_current_server_line_fits_and_an_old_one_takes_every_layer():
    cmd = parse_command("llama-server -m x.gguf")
    now, _ = command_settings(cmd)
    assert (now["fit"], now["n_gpu_layers"], now["ctx_size"], now["parallel"], now["kv_unified"]) == \
        (True, -1, 0, 4, True)
    old, _ = command_settings(cmd, 7000)
    assert (old["fit"], old["n_gpu_layers"], old["ctx_size"], old.get("parallel", 1)) == (False, 999, 4096, 1)
    explicit, _ = command_settings(parse_command("llama-server -m x.gguf -np 1 -c 0 --fit off"))
    assert (explicit["fit"], explicit["parallel"], explicit["n_gpu_layers"]) == (False, 1, 999)


def _scenario(settings: dict, reserved_gib: float = 0.0):
    spec = MachineSpec("rtx4070tisuper", "ryzen7_9700x", reserved_gib=reserved_gib)
    return build_scenario(scenario_dict(spec, QWEN, "Q4_K_M", settings), "test")


def _card_bytes(scn, settings) -> tuple[float, float]:
    st = setup_llamacpp(scn, "box", settings)
    card = st.memory[1]
    return card.total, card.free


@pytest.mark.parametrize("target_mib", [512, 1024, 3072])
def test_the_fit_keeps_its_target_free_and_a_larger_target_never_uses_more_vram(target_mib):
    auto = {"fit": True, "n_gpu_layers": -1, "ctx_size": 0, "kv_unified": True, "parallel": 4,
            "fit_target_mib": target_mib}
    scn = _scenario(auto)
    settings, fit = resolve(scn, "box", scn.machines["box"].engine.llamacpp)
    assert fit is not None and not fit.failed and settings.override_tensor  # 17 GiB on 16: experts move
    used, free = _card_bytes(scn, settings)
    assert free - used >= target_mib * 2**20
    larger = _scenario(auto | {"fit_target_mib": target_mib + 1024})
    more = resolve(larger, "box", larger.machines["box"].engine.llamacpp)[0]
    assert _card_bytes(larger, more)[0] <= used


def test_less_vram_free_never_gives_the_fit_more_of_the_card():
    auto = {"fit": True, "n_gpu_layers": -1, "ctx_size": 8192}
    used = []
    for reserved in (0.0, 2.0, 4.0):
        scn = _scenario(auto, reserved)
        settings = resolve(scn, "box", scn.machines["box"].engine.llamacpp)[0]
        used.append(_card_bytes(scn, settings)[0])
    assert used[0] >= used[1] >= used[2]


def test_the_fit_leaves_layers_alone_when_the_line_sets_them():
    scn = _scenario({"fit": True, "n_gpu_layers": 99, "ctx_size": 0, "kv_unified": True})
    settings, fit = resolve(scn, "box", scn.machines["box"].engine.llamacpp)
    assert fit is not None and "n_gpu_layers already set by user" in fit.failed
    assert settings.ctx_size == 4096 and settings.n_gpu_layers == 99  # the context it cut stays cut


def test_a_training_context_that_fits_is_kept_whole():
    small = "calibration/models/qwen3-4b.json"
    spec = MachineSpec("rtx4090", "ryzen7_9700x")
    scn = build_scenario(scenario_dict(spec, small, "Q4_K_M", {"fit": True, "n_gpu_layers": -1, "ctx_size": 0,
                                                               "kv_unified": True}), "test")
    settings, fit = resolve(scn, "box", scn.machines["box"].engine.llamacpp)
    assert fit is not None and not fit.failed and settings.ctx_size == 40960 and not settings.override_tensor


def test_threads_batch_speeds_up_prompts_on_the_cpu_and_leaves_decode_alone():
    from sim.llamacpp.bench import run_bench

    spec = MachineSpec(None, "ryzen9_7950x")
    rows = {}
    for tb in (4, 16):
        scn = build_scenario(scenario_dict(spec, QWEN, "Q4_K_M", {"threads": 4, "threads_batch": tb}), "test")
        rows[tb] = {r.test: r.tok_s for r in run_bench(scn, "box", n_prompt=[512], n_gen=[128], n_depth=[0])}
    assert rows[16]["pp512"] > rows[4]["pp512"] and rows[16]["tg128"] == rows[4]["tg128"]


def test_sim_llama_runs_a_current_server_line_and_prints_the_fit_as_flags():
    r = CliRunner().invoke(main, ["llama", "llama-server -m x.gguf", "--model", QWEN, "--quant", "Q4_K_M",
                                  "--gpu", "rtx4070tisuper", "--host", "ryzen7_9700x", "--json"])
    assert r.exit_code == 0, r.output
    assert "llama.cpp's --fit" in r.stderr and "the fit's choice as flags: --n-gpu-layers 49" in r.stderr
    rows = json.loads(r.stdout)["bench"]
    assert all(not row["error"] and row["vram_gib"] <= 16.0 - 1.0 for row in rows)


@pytest.mark.parametrize("machine", [
    ["--gpu", "rtx4070tisuper", "--host", "ryzen7_7700x", "--ram-gib", "64"],
    ["--gpu", "rx6700xt", "--host", "ryzen5_5600"],
    ["--vram-gib", "12", "--gpu-gbps", "384", "--gpu-tflops", "13.2", "--backend", "hip", "--dram", "DDR4-3200",
     "--channels", "2", "--cores", "6", "--threads", "12", "--set", "machines.box.host.boost_ghz=4.4",
     "--set", "machines.box.host.fp32_flops_per_cycle=32"],
    ["--host", "ryzen7_7700x", "--ram-gib", "64"],
])
def test_any_machine_in_one_line(machine):
    r = CliRunner().invoke(main, ["llama", "llama-server -m x.gguf -c 8192", "--model", QWEN, "--quant", "Q4_K_M",
                                  *machine, "--json"])
    assert r.exit_code == 0, r.output
    assert all(not row["error"] and row["tok_s"] > 0 for row in json.loads(r.stdout)["bench"])


def test_an_unknown_part_gets_a_did_you_mean_and_the_flags_that_describe_it():
    r = CliRunner().invoke(main, ["llama", "llama-server -m x.gguf", "--model", QWEN, "--quant", "Q4_K_M",
                                  "--gpu", "rtx4070ti_supr", "--host", "ryzen7_9700x"])
    assert r.exit_code == 2 and "did you mean" in r.output and "--vram-gib" in r.output


def test_advice_says_what_it_gains_over_the_fit_and_where_the_size_comes_from():
    r = CliRunner().invoke(main, ["advise", "--model", QWEN, "--quant", "Q4_K_M", "--gpu", "rtx4070tisuper",
                                  "--host", "ryzen7_9700x", "--top", "1", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["fit"]["loads"] and doc["fit"]["vram_gib"] <= 16.0 - 1.0
    assert doc["best"]["tg"][0]["vram_gib"] <= 16.0 - 1.0  # the margin --fit keeps
    assert doc["fit"]["tg_gain"] >= 0 and doc["size_from"].startswith("config.json")


def test_card_bytes_are_bytes():
    scn = _scenario({"n_gpu_layers": 0})
    used, free = _card_bytes(scn, scn.machines["box"].engine.llamacpp)
    assert 0 < used < free and free == pytest.approx(16.0 * GIB, rel=0.01)


def test_an_anchor_narrows_the_band_at_its_own_placement_only_as_far_as_repeats_show():
    from sim.llamacpp.params import BAND_NEAR, BAND_WITHIN

    r = CliRunner().invoke(main, ["advise", "--model", QWEN, "--quant", "Q4_K_M", "--gpu", "rtx4070tisuper",
                                  "--host", "ryzen7_9700x", "--top", "3", "--json", "--anchor",
                                  "n_cpu_moe=10,cache_type_k=q8_0,cache_type_v=q8_0:tg=70"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["best"]["tg"]
    at = [c for c in best if c["settings"]["n_cpu_moe"] == 10 and c["settings"]["cache_type_k"] == "q8_0"]
    others = [c for c in best if c not in at]
    assert at and others
    repeat = BAND_NEAR["tg"][0]
    assert repeat[0] == -1.0 and repeat[2] / repeat[1] < BAND_WITHIN["tg"][1] / BAND_WITHIN["tg"][0]
    for c in at:
        assert [b / c["tg_tok_s"] for b in c["tg_band"]] == pytest.approx(list(repeat[1:]), rel=1e-6)
    for c in others:  # held-out pairs a little apart spread wider than one setup's rows: the band stays
        assert [b / c["tg_tok_s"] for b in c["tg_band"]] == pytest.approx(list(BAND_WITHIN["tg"]), rel=1e-6)


def test_the_fit_rules_merged_into_one_per_pattern_place_every_tensor_where_the_fit_did():
    from sim.llamacpp.fit import merged_rules

    scn = _scenario({"fit": True, "n_gpu_layers": -1, "ctx_size": 0, "kv_unified": True})
    settings, _ = resolve(scn, "box", scn.machines["box"].engine.llamacpp)
    merged = settings.model_copy(update={"override_tensor": merged_rules(settings.override_tensor)})
    assert len(merged.override_tensor) < len(settings.override_tensor)
    a, b = setup_llamacpp(scn, "box", settings), setup_llamacpp(scn, "box", merged)
    assert a.placement.devices == b.placement.devices


@given(st.sets(st.integers(0, 299), min_size=1, max_size=40))
@settings(max_examples=300, deadline=None)
def test_a_layer_regex_matches_exactly_its_blocks(layers):
    import re

    from sim.llamacpp.fit import layer_regex

    rx = re.compile(r"blk\.(" + layer_regex(sorted(layers)) + r")\.ffn")
    assert {n for n in range(0, 400) if rx.search(f"blk.{n}.ffn_up_exps.weight")} == layers


_RULE = st.one_of(
    st.builds(lambda n, part, buf: rf"blk\.{n}\.{part}={buf}", st.integers(0, 30),
              st.sampled_from(["ffn_down.*", "ffn_(up|down|gate_up|gate)_(ch|)exps", "ffn_up", "attn"]),
              st.sampled_from(["CPU", "CUDA0", "CUDA1"])),
    st.sampled_from(["exps=CPU", "ffn_up=CUDA1", r"blk\.(1|2)\.ffn=CPU"]))


@given(st.lists(_RULE, max_size=25))
@settings(max_examples=300, deadline=None)
def test_merged_rules_send_every_tensor_where_the_rules_did(rules):
    import re

    from sim.llamacpp.fit import merged_rules

    def device(rule_list, name):
        for rule in rule_list:
            pattern, _, buffer = rule.rpartition("=")
            if re.search(pattern, name):
                return buffer
        return None

    merged = merged_rules(rules)
    assert len(merged) <= len(rules)
    for n in range(0, 32):
        for part in ("ffn_down_exps", "ffn_up_exps", "ffn_up", "ffn_down", "attn_q", "ffn_gate_shexp"):
            name = f"blk.{n}.{part}.weight"
            assert device(merged, name) == device(rules, name), (name, rules, merged)


def test_an_older_build_reads_a_bare_server_line_as_every_layer_and_cannot_load_it():
    args = ["--model", QWEN, "--quant", "Q4_K_M", "--gpu", "rtx4070tisuper", "--host", "ryzen7_9700x", "--json"]
    old = CliRunner().invoke(main, ["llama", "llama-server -m x.gguf", "--build", "b7000", *args])
    assert old.exit_code == 0, old.output
    assert all(row["error"] and "cannot load" in row["error"] for row in json.loads(old.stdout)["bench"])
    logged = CliRunner().invoke(main, ["llama", "llama-server -m x.gguf\nversion: 7000 (abcdef01)", *args])
    assert json.loads(logged.stdout)["bench"] == json.loads(old.stdout)["bench"]  # the build read from the text
    bad = CliRunner().invoke(main, ["llama", "llama-server -m x.gguf", "--build", "latest", *args])
    assert bad.exit_code == 2 and "--build" in bad.output


def _resolved(model: str, quant: str, gpu: str | None, gpus: int, settings: dict, ram_gib: float | None = None):
    spec = MachineSpec(gpu, "ryzen9_7950x", gpus=gpus, host_fields={"ram_gib": ram_gib} if ram_gib else {})
    scn = build_scenario(scenario_dict(spec, model, quant, settings), "test")
    resolved, fit = resolve(scn, "box", scn.machines["box"].engine.llamacpp)
    return scn, resolved, fit


@pytest.mark.parametrize("model, quant", [("calibration/models/glm-4.5-air.json", "Q4_K_M"),
                                          ("calibration/models/gpt-oss-120b.json", "MXFP4_MOE")])
def test_on_two_cards_the_fit_fills_both_and_each_keeps_its_margin(model, quant):
    auto = {"fit": True, "n_gpu_layers": -1, "ctx_size": 0, "kv_unified": True}
    scn, settings, fit = _resolved(model, quant, "rtx4090", 2, auto)
    assert fit is not None and not fit.failed and settings.tensor_split and len(settings.tensor_split) == 2
    st = setup_llamacpp(scn, "box", settings)
    for card in st.memory[1:]:
        assert card.free - card.total >= 1024 * 2**20  # its margin kept
        assert card.total > 0.85 * card.free  # and the card used: the fit went on to the second card


def test_the_context_is_cut_only_when_the_cards_together_are_short_and_never_lengthened():
    qwen14 = "calibration/models/qwen2.5-14b.json"
    auto = {"fit": True, "n_gpu_layers": -1, "ctx_size": 0, "kv_unified": True, "tensor_split": [1.0, 2.6]}
    _, settings, fit = _resolved(qwen14, "Q4_K_M", "rtx4090", 2, auto)
    assert settings.ctx_size <= 131072 and "tensor split" in fit.failed


def test_the_cpu_alone_cuts_the_context_to_what_the_ram_holds():
    qwen14 = "calibration/models/qwen2.5-14b.json"
    auto = {"fit": True, "n_gpu_layers": -1, "ctx_size": 0, "kv_unified": True}
    scn, settings, fit = _resolved(qwen14, "Q4_K_M", None, 0, auto, ram_gib=32)
    assert fit is not None and not fit.failed and 4096 <= settings.ctx_size < 131072
    assert setup_llamacpp(scn, "box", settings).ram_gib() <= 32 - 1


def test_a_split_on_one_card_leaves_the_placement_to_the_fit():
    auto = {"fit": True, "n_gpu_layers": -1, "ctx_size": 8192, "tensor_split": [1.0]}
    _, settings, fit = _resolved(QWEN, "Q4_K_M", "rtx4060ti_16gb", 1, auto)
    assert fit is not None and not fit.failed and settings.override_tensor


def test_advice_on_two_cards_pastes_the_split_and_loads():
    r = CliRunner().invoke(main, ["advise", "--model", "calibration/models/glm-4.5-air.json", "--quant", "Q4_K_M",
                                  "--gpu", "rtx4090", "--gpus", "2", "--host", "ryzen9_7950x", "--ram-gib", "128",
                                  "--top", "1", "--json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["best"]["tg"][0]
    assert "-ts " in best["flags"] and "left out" not in r.stderr


def test_a_band_never_narrows_further_from_the_anchor():
    from sim.llamacpp.advise import Advice, Candidate
    from sim.llamacpp.params import BAND_NEAR, BAND_WITHIN

    base = _scenario({}).machines["box"].engine.llamacpp
    adv = Advice([], band=dict(BAND_WITHIN), anchor={"pp": 1.0}, anchor_share={"pp": 0.5},
                 anchor_flags={"pp": ()}, near={"pp": BAND_NEAR["pp"]})
    widths = []
    for share in (0.5, 0.49, 0.45, 0.35, 0.1):
        c = Candidate(base, 10.0, 10.0, 1.0, 1.0, 1.0, 0.0, 0, cpu_weight_share=share)
        lo, hi = adv.band_of(c, "pp")
        widths.append(hi / lo)
    assert widths == sorted(widths)


def test_advice_from_a_scenario_file_is_re_run_on_its_machine(tmp_path):
    scenario = tmp_path / "glm.yaml"
    machine = ["--model", "calibration/models/glm-4.5-air.json", "--quant", "Q4_K_M", "--gpu", "rtx4090", "--gpus",
               "2", "--host", "ryzen9_7950x"]
    wrote = CliRunner().invoke(main, ["llama", "llama-server -m x.gguf -c 8192", *machine, "--write", str(scenario)])
    assert wrote.exit_code == 0, wrote.output
    r = CliRunner().invoke(main, ["advise", str(scenario), "--top", "1", "--json",
                                  "--set", "machines.box.gpus.gpu1.reserved_gib=20"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["best"]["tg"][0]
    assert best["vram_gib"] < 48 - 20 and "left out" not in r.stderr  # --set applied, every shown line loads
