"""The fuzz campaign over the files commands read besides scenarios: model files (GGUF headers written here with the
``gguf`` package, then truncated, flipped and given huge or zero counts and dimensions; Hugging Face config.json
files with wrong types and absurd numbers) through ``sim model`` and ``sim llama --model``; llama-bench outputs in
every format the reader takes through ``sim logs`` and ``sim fit-offload --bench``; the fits' tables and traces
(``sim fit-loads``, ``sim fit-loading``, ``sim fit-routing --table/--trace``). The rules and caps are those of
tests/test_fuzz_commands.py (tests/fuzz_support.py). A result must not take an impossible value as data: a GGUF with
a zero dimension, a dimension past 2**31 or tensor data past the file's end is refused, and llama-bench rows keep
their rates, sizes and times within the ranges of sim.formats.quantities.
"""

from __future__ import annotations

import json
import os
import re
import struct

import numpy as np
import pytest
from fuzz_support import (  # noqa: F401 (fuzz_stats: the session fixture writing the statistics)
    bounded,
    finite_problems,
    fuzz,
    fuzz_stats,
    geometry_problems,
    invoke,
    mutate_lines,
    path,
)
from hypothesis import example, given
from hypothesis import strategies as st

from sim.formats.quantities import SECONDS, SIZE_BYTES, TOKENS, TOKENS_PER_S

MACHINE = ["--gpu", "rtx4060ti_16gb", "--host", "ryzen7_9700x"]

# --- GGUF headers -------------------------------------------------------------------------------------------------

H, HEADS, KV_HEADS, FF, EXPERTS, VOCAB = 64, 4, 2, 32, 8, 96


def write_gguf(file: str, moe: bool) -> None:
    """A two-block GGUF (qwen3moe with 8 experts, or llama) of F16 weights and F32 norms, with a string array."""
    import gguf
    w = gguf.GGUFWriter(file, "qwen3moe" if moe else "llama")
    for add, value in ((w.add_block_count, 2), (w.add_embedding_length, H), (w.add_head_count, HEADS),
                       (w.add_head_count_kv, KV_HEADS), (w.add_context_length, 4096), (w.add_feed_forward_length, FF),
                       *(((w.add_expert_count, EXPERTS), (w.add_expert_used_count, 2)) if moe else ())):
        add(value)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    kv = KV_HEADS * H // HEADS
    ffn = ({"ffn_gate_inp": (EXPERTS, H), "ffn_gate_exps": (EXPERTS, FF, H), "ffn_up_exps": (EXPERTS, FF, H),
            "ffn_down_exps": (EXPERTS, H, FF)} if moe else
           {"ffn_gate": (FF, H), "ffn_up": (FF, H), "ffn_down": (H, FF)})
    block = {"attn_q": (H, H), "attn_k": (kv, H), "attn_v": (kv, H), "attn_output": (H, H), "attn_norm": (H,), **ffn}
    shapes = [("token_embd.weight", (VOCAB, H)), ("output_norm.weight", (H,))]
    shapes += [(f"blk.{b}.{name}.weight", shape) for b in range(2) for name, shape in block.items()]
    for name, shape in shapes:
        w.add_tensor(name, np.zeros(shape, np.float32 if len(shape) == 1 else np.float16))
    for step in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
        step()


SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes


def gguf_fields(data: bytes) -> tuple[list[tuple[str, int, int]], int]:
    """(kind, offset, width in bytes) of every count, length, type, integer value, dimension and tensor offset in a
    GGUF header, and the byte where the header ends (the tensor data follows, aligned)."""
    fields = [("tensor_count", 8, 8), ("kv_count", 16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def take(kind: str, width: int) -> int:
        nonlocal pos
        fields.append((kind, pos, width))
        value = int.from_bytes(data[pos:pos + width], "little")
        pos += width
        return value

    def value(vtype: int) -> None:
        nonlocal pos
        if vtype == 8:
            n = take("string_length", 8)
            pos += n
        elif vtype == 9:
            itype, n = take("array_type", 4), take("array_length", 8)
            for _ in range(n):
                value(itype)
        elif vtype in (4, 5, 10, 11):
            take("int_value", SCALAR_BYTES[vtype])
        else:
            pos += SCALAR_BYTES[vtype]

    for _ in range(n_kv):
        n = take("key_length", 8)  # (pos += take(...) would add to pos as it was before take moved it)
        pos += n
        value(take("value_type", 4))
    for _ in range(n_tensors):
        n = take("name_length", 8)
        pos += n
        for _ in range(take("n_dims", 4)):
            take("dim", 8)
        take("tensor_type", 4)
        take("tensor_offset", 8)
    return fields, pos


FIELD_VALUES = {"tensor_count": [0, 1, 2**31, 2**32 + 1, 2**63 - 1, 2**64 - 1], "kv_count": [0, 1, 2**31, 2**64 - 1],
                "key_length": [0, 1, 2**20, 2**40, 2**64 - 1], "string_length": [0, 2**20, 2**40, 2**64 - 1],
                "name_length": [0, 1, 2**40, 2**64 - 1], "array_type": [8, 9, 13, 2**32 - 1],
                "array_length": [0, 2**31, 2**62, 2**64 - 1], "value_type": [8, 9, 13, 99, 2**32 - 1],
                "int_value": [0, 1, 2**31 - 1, 2**32 - 1, 2**63 - 1], "n_dims": [0, 5, 2**31, 2**32 - 1],
                "dim": [0, 0, 1, 3, 2**31 + 1, 2**40, 2**63 - 1, 2**64 - 1], "tensor_type": [0, 4, 39, 99, 2**32 - 1],
                "tensor_offset": [1, 3, 2**40, 2**64 - 32]}


def impossible(kind: str, value: int, data: bytes, header_end: int) -> str:
    """Why a GGUF changed this way cannot be a model (a result would take it as data), or ''."""
    reasons = [("dim", value == 0, "a tensor dimension of 0"), ("dim", value > 2**31, f"a dimension of {value:,}"),
               ("tensor_offset", value >= 2**40, "tensor data past the end of the file"),
               ("tensor_offset", value % 32 != 0, f"a tensor offset of {value} (GGUF aligns tensor data to 32)"),
               ("tensor_count", value == 0, "no tensors"),
               ("truncate", value < header_end, f"the header cut at byte {value:,} of {header_end:,}"),
               ("truncate", header_end <= value < len(data), f"the tensor data cut at byte {value:,} of {len(data):,}")]
    return next((why for k, hit, why in reasons if k == kind and hit), "")


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("gguf")
    out = {}
    for name, moe in (("moe", True), ("dense", False)):
        write_gguf(str(folder / f"{name}.gguf"), moe)
        out[name] = (folder / f"{name}.gguf").read_bytes()
    return out


@st.composite
def gguf_mutants(draw, bases: dict[str, bytes]) -> tuple[bytes, str, str]:
    """(bytes, what was done, why the result cannot be a model or ''): a valid GGUF with a header field set to an
    extreme, cut short, bytes flipped or garbage appended; or no GGUF at all."""
    name = draw(st.sampled_from(sorted(bases)))
    data = bytearray(bases[name])
    fields, end = gguf_fields(bytes(data))
    kind = draw(st.sampled_from(["field", "field", "field", "field", "truncate", "truncate", "flip", "append",
                                 "other"]))
    if kind == "field":  # a kind of field first (each as likely), then one of them
        which = draw(st.sampled_from(sorted({f[0] for f in fields})))
        kind_, offset, width = draw(st.sampled_from([f for f in fields if f[0] == which]))
        value = draw(st.sampled_from(FIELD_VALUES[kind_])) % 2 ** (8 * width)
        data[offset:offset + width] = value.to_bytes(width, "little")
        return bytes(data), f"{name}.gguf: {kind_} at byte {offset} set to {value}", impossible(kind_, value, data, end)
    if kind == "truncate":
        at = draw(st.one_of(st.integers(0, end), st.integers(0, len(data) - 1)))
        return bytes(data[:at]), f"{name}.gguf cut at byte {at}", impossible("truncate", at, data, end)
    if kind == "flip":
        spots = draw(st.lists(st.integers(0, end - 1), min_size=1, max_size=8))
        for at in spots:
            data[at] ^= draw(st.integers(1, 255))
        return bytes(data), f"{name}.gguf with bytes {spots} flipped", ""
    if kind == "append":
        return bytes(data) + draw(st.binary(min_size=1, max_size=64)), f"{name}.gguf with bytes appended", ""
    other = draw(st.sampled_from([b"", b"GGUF", b"GGUF\x03\x00\x00\x00", b"GGUF\x01\x00\x00\x00" + bytes(data[8:]),
                                  b"GGUF\x63\x00\x00\x00" + bytes(data[8:]), b"FUGG" + bytes(data[4:]),
                                  bytes(data[:4]) + b"\x00\x00\x00\x03" + bytes(data[8:]), b"{}", b"\x00" * 4096]))
    return other, f"not a GGUF ({other[:12]!r}, {len(other)} bytes)", ""


@fuzz(240)
@given(data=st.data())
def test_gguf_headers_are_read_or_refused_in_one_line(data, ggufs, tmp_path_factory):
    """A GGUF header changed where a reader trusts it: counts, lengths, types, dimensions, offsets; cut; flipped."""
    blob, note, why = data.draw(gguf_mutants(ggufs))
    file = tmp_path_factory.mktemp("g") / "model.gguf"
    file.write_bytes(blob)
    how = data.draw(st.sampled_from(["model", "model", "json", "llama", "llama-m"]))
    if how in ("model", "json"):
        args = ["model", str(file)] + (["--json"] if how == "json" else [])
    elif how == "llama":
        args = ["llama", "llama-server -ngl 99 -c 4096", "--model", str(file), *MACHINE]
    else:
        args = ["llama", f"llama-server -m {file} -ngl 99", *MACHINE, "--json"]
    invoke("model" if how in ("model", "json") else "llama", args, note=note, files=[str(file)],
           check=(lambda out: [f"taken as a model: {why}"]) if why else geometry_problems)


# --- config.json ------------------------------------------------------------------------------------------------------

CONFIGS = sorted(f for f in os.listdir(path("calibration", "models")) if f.endswith(".json"))
CONFIG_KEYS = ["model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "intermediate_size", "vocab_size", "head_dim", "num_experts",
               "num_experts_per_tok", "moe_intermediate_size", "torch_dtype", "quantization_config", "text_config",
               "tie_word_embeddings", "layer_types", "sliding_window", "first_k_dense_replace", "kv_lora_rank",
               "hidden_size", "num_attention_heads"]  # the two that give head_dim, twice as likely
ODD_JSON = [0, -1, 1, 2**31, 2**63, 10**30, int("9" * 400), 1e308, -1e308, 1e-320, 0.5, float("nan"), float("inf"),
            "64", "", "x", None, True, False, [], [64], {}, {"a": 1}, [[1]]]


def odd_json(draw, current: object = None):
    """A JSON value where ``current`` was: often of another type than it (a list for a name, a name for a number),
    or a number at an extreme; anything at all otherwise."""
    wrong = {str: [["x"], {"a": 1}, 1, None, True], int: [0, 1, 3, -1, 2**31, 10**30, 1.5, "64", [64], None],
             list: ["x", 1, {}, [None], [[1]]], dict: [[], "x", 1, {"a": [1]}]}.get(type(current))
    anything = st.one_of(st.sampled_from(ODD_JSON), st.integers(), st.floats(), st.text(max_size=8),
                         st.lists(st.integers(-5, 10**6), max_size=4))
    return draw(st.one_of(st.sampled_from(wrong), anything) if wrong else anything)


@st.composite
def config_mutants(draw) -> tuple[str, str]:
    """(text, what was done): a shipped config.json with one to three values replaced, keys dropped or added, or cut
    short, or any JSON at all."""
    name = draw(st.sampled_from(CONFIGS))
    with open(path("calibration", "models", name), encoding="utf-8") as fh:
        doc = json.load(fh)
    kind = draw(st.sampled_from(["values", "values", "values", "cut", "json"]))
    if kind == "json":
        other = draw(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
                                  lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6),
                                                                                             inner, max_size=3),
                                  max_leaves=8))
        return json.dumps(other), f"any JSON instead of {name}"
    done = []
    target = doc.get("text_config", doc) if isinstance(doc.get("text_config"), dict) and draw(st.booleans()) else doc
    for n in range(draw(st.integers(1, 3))):  # the first change: a key the reader needs set to an odd value
        keys = sorted(k for k in target if not k.startswith("_"))
        key = draw(st.sampled_from(CONFIG_KEYS) if n == 0 else st.sampled_from(keys or CONFIG_KEYS))
        op = draw(st.sampled_from(["set", "scale"] if n == 0 else ["set", "set", "scale", "drop", "add"]))
        if op == "drop":
            target.pop(key, None)
        elif op == "scale" and isinstance(target.get(key), int) and not isinstance(target[key], bool):
            target[key] *= draw(st.sampled_from([0, -1, 3, 1000, 2**20]))
        elif op != "scale":
            key = key if op == "set" else draw(st.sampled_from(["num_local_experts", "head_dim", "n_routed_experts",
                                                                "quantization_config", "layer_types", "x"]))
            target[key] = odd_json(draw, target.get(key))
        done.append(f"{op} {key}")
    text = json.dumps(doc)
    if kind == "cut":
        text = text[:draw(st.integers(0, len(text)))]
        done.append("cut")
    return text, f"{name}: {', '.join(done)}"


def config_text(name: str, **changes: object) -> tuple[str, str]:
    """A shipped config.json with ``changes``, and what they are (an explicit example)."""
    with open(path("calibration", "models", name), encoding="utf-8") as fh:
        return json.dumps(json.load(fh) | changes), f"{name}: {changes}"


@fuzz(300)
@example(case=config_text("llama-3.1-8b.json", num_attention_heads=32_000), how="json", quant="Q4_K_M")
@example(case=config_text("mistral-7b-v0.1.json", model_type=["mistral"]), how="model", quant="Q4_K_M")
@given(case=config_mutants(), how=st.sampled_from(["model", "quant", "json", "json", "json", "llama"]),
       quant=st.sampled_from(["Q4_K_M", "Q8_0", "MXFP4_MOE", "BF16", "IQ4_XS", "FP8"]))
def test_model_configs_are_read_or_refused_in_one_line(case, how, quant, tmp_path_factory):
    """config.json with wrong types, huge and non-finite numbers, missing keys; read alone or as --model."""
    text, note = case
    file = tmp_path_factory.mktemp("c") / "config.json"
    file.write_text(text, encoding="utf-8")
    if how == "llama":
        args = ["llama", "llama-server -ngl 99 -c 4096", "--model", str(file), "--quant", quant, *MACHINE,
                "--write", str(file.with_name("s.yaml"))]
    else:
        args = ["model", str(file)] + (["--quant", quant] if how == "quant" else []) + \
            (["--json"] if how != "model" else [])
    invoke("model" if how != "llama" else "llama", args, note=note, files=[str(file)], check=geometry_problems)


# --- llama-bench, sweep-bench and batched-bench outputs ---------------------------------------------------------------

BENCH = path("tests", "data", "llamacpp")
BENCH_FILES = sorted(f for f in os.listdir(BENCH) if f != "README.md")
LOG_FILES = BENCH_FILES + sorted(os.path.join("..", "..", "..", "calibration", "logs", f)
                                 for f in os.listdir(path("calibration", "logs")))  # server logs, from BENCH
RATES = ("avg_ts", "stddev_ts", "s_pp_tok_s", "s_tg_tok_s", "s_tok_s", "prefill_tok_s", "decode_tok_s",
         "prompt_throughput_tok_s", "generation_throughput_tok_s")
ROW_BOUNDS = {k: (0.0, TOKENS_PER_S.hi) for k in RATES}
ROW_BOUNDS |= {k: (0.0, TOKENS.hi) for k in ("n_prompt", "n_gen", "n_depth", "pp", "tg", "n_kv", "n_kv_max",
                                             "prompt_tokens", "cached_tokens", "output_tokens")}
ROW_BOUNDS |= {k: (0.0, SECONDS.hi) for k in ("t_pp_s", "t_tg_s", "t_s", "prefill_s", "decode_s", "ttft_s")}
ROW_BOUNDS |= {k: (0.0, 1.0) for k in ("acceptance", "expert_hit_rate", "pcie_share", "kv_usage", "prefix_hit_rate")}
ROW_BOUNDS |= {"model_size_bytes": (1.0, SIZE_BYTES.hi)}


def bench_text(data, files: list[str] = BENCH_FILES, copies: tuple[int, ...] = (2, 50, 3000)
               ) -> tuple[str, str, str]:
    """(text, file name, what was done): a llama-bench family output with its lines changed (a line duplicated into
    one of ``copies``); JSON outputs also with a field set to an odd value."""
    name = data.draw(st.sampled_from(files))
    with open(os.path.join(BENCH, name), encoding="utf-8") as fh:
        text = fh.read()
    if name.endswith((".json", ".jsonl")) and data.draw(st.booleans()):
        keys = sorted(set(re.findall(r'"(\w+)":', text)))
        key = data.draw(st.sampled_from(keys))
        value = json.dumps(odd_json(data.draw))
        lines = text.splitlines()
        i = data.draw(st.sampled_from([n for n, line in enumerate(lines) if f'"{key}":' in line]))
        lines[i] = re.sub(rf'"{key}": *("[^"]*"|[^,}}\]]*)', lambda _: f'"{key}": {value}', lines[i], count=1)
        return "\n".join(lines) + "\n", name, f"{name}: {key} set to {value[:40]}"
    lines, done = mutate_lines(data.draw, text.splitlines(), copies=copies)
    return "\n".join(lines) + "\n", name, f"{name}: {done}"


def rows_check(out) -> list[str]:
    """Rows of ``sim logs --json`` within the ranges of sim.formats.quantities, no more cached than prompt tokens."""
    doc = json.loads(out.stdout)
    rows = doc.get("rows", []) + doc.get("batched_rows", [])
    found = finite_problems(rows, ROW_BOUNDS, "sim logs row")
    found += [f"sim logs row {r.get('line')}: {r['cached_tokens']} cached of {r['prompt_tokens']} prompt tokens taken "
              "as data" for r in rows if isinstance(r.get("cached_tokens"), int) and
              isinstance(r.get("prompt_tokens"), int) and r["cached_tokens"] > r["prompt_tokens"]][:1]
    return found


@fuzz(300)
@given(data=st.data(), fmt=st.sampled_from(["--json", "--json", "--csv", ""]))
def test_bench_outputs_are_read_into_sane_rows_or_refused(data, fmt, tmp_path_factory):
    """Every format the reader takes (md, csv, json, jsonl, sql, sweep-bench, batched-bench; and the shipped server
    logs) with numbers replaced by odd ones, lines cut, dropped, repeated, swapped: rows keep rates, sizes, times
    and shares within range."""
    text, name, note = bench_text(data, LOG_FILES)
    file = tmp_path_factory.mktemp("b") / os.path.basename(name)
    file.write_text(text, encoding="utf-8")
    invoke("logs", ["logs", str(file)] + ([fmt] if fmt else []), note=note,
           check=rows_check if fmt == "--json" else None, files=[str(file)])


@pytest.fixture(scope="module")
def llamacpp_scenario(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("fo")
    with open(path("scenarios", "llamacpp_3070ti.yaml"), encoding="utf-8") as fh:
        text = fh.read().replace("../calibration/models/", path("calibration", "models") + "/")
    (folder / "box.yaml").write_text(text, encoding="utf-8")
    return str(folder / "box.yaml")


SMALL_BENCH = [f for f in BENCH_FILES if f.startswith("synthetic") or f == "bench_md_ik437.txt"]


@fuzz(20)
@given(data=st.data())
def test_fit_offload_fits_own_bench_runs_or_refuses_them(data, llamacpp_scenario, tmp_path_factory):
    """fit-offload --bench on changed llama-bench outputs: the small ones (a fit's cost grows with its rows: the
    30-row bench_md_ik520.txt takes 5 s), a row at most 10 times, two least-squares iterations (0.1-0.9 s a case)."""
    text, name, note = bench_text(data, SMALL_BENCH, copies=(2, 10))
    folder = tmp_path_factory.mktemp("f")
    (folder / name).write_text(text, encoding="utf-8")
    invoke("fit-offload", ["fit-offload", "--scenario", llamacpp_scenario, "--bench", str(folder / name), "--out",
                           str(folder / "cal.yaml"), "--max-evaluations", "2"], note=note, files=[str(folder / name)])


@fuzz(3)
@given(copies=st.sampled_from([100, 300, 1000]), name=st.sampled_from(["synthetic_bench.md", "synthetic_bench.csv"]))
def test_fit_offload_on_a_long_bench_output_is_bounded(copies, name, llamacpp_scenario, tmp_path_factory):
    """A llama-bench output of hundreds of rows (a sweep of -ncmoe x -ub x -p makes them): a fit of two iterations
    within the cap, or the rows refused (fit-loads refuses a repeated row id)."""
    with open(os.path.join(BENCH, name), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    row = next(i for i, line in enumerate(lines) if "pp512" in line or line.startswith('"'))  # a test's row
    folder = tmp_path_factory.mktemp("n")
    (folder / name).write_text("\n".join(lines[:row] + [lines[row]] * copies + lines[row + 1:]) + "\n")
    invoke("fit-offload", ["fit-offload", "--scenario", llamacpp_scenario, "--bench", str(folder / name), "--out",
                           str(folder / "cal.yaml"), "--max-evaluations", "2"], note=f"a row {copies} times")


# --- the fits' tables and traces ----------------------------------------------------------------------------------

def table_lines(name: str) -> list[str]:
    with open(path("calibration", name), encoding="utf-8") as fh:
        return fh.read().splitlines()


LOAD_TABLES = [("fit-loads", "public_loads.yaml", "public_loads.csv")] * 4 + [
    ("fit-loading", "home_lab.yaml", name) for name in ("loading_stages.csv", "loading_mac_sample.csv")] * 3


@fuzz(140)
@given(data=st.data(), table=st.sampled_from(LOAD_TABLES))
def test_load_tables_fit_or_are_refused_in_one_line(data, table, tmp_path_factory):
    """fit-loads on a changed public_loads.csv, fit-loading on changed loading tables (0.05-0.3 s a fit)."""
    command, scenario, name = table
    lines, note = mutate_lines(data.draw, table_lines(name), copies=(2, 10, 3000))
    file = tmp_path_factory.mktemp("l") / name
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    invoke(command, [command, path("scenarios", scenario), "--table", str(file), "--json"], note=note,
           files=[str(file)])


@pytest.fixture
def quick_routing_fit(monkeypatch):
    """The routing fit's least squares held to two evaluations and one start: the cost of a fit (1-20 s on the
    public table) is the fit's, not the input's; reading, checking, the first residuals and writing are all run."""
    import scipy.optimize

    import sim.calibration.routing_fit as rf

    solve, fit = scipy.optimize.least_squares, rf.fit
    quick = lambda *a, **k: solve(*a, **{**k, "max_nfev": 2})  # noqa: E731
    monkeypatch.setattr(scipy.optimize, "least_squares", quick)  # imported where the fit runs
    monkeypatch.setattr(rf, "least_squares", quick, raising=False)
    monkeypatch.setattr(rf, "fit", lambda *a, **k: fit(*a, **{**k, "starts": 1}))


@fuzz(50)
@given(data=st.data(), sample=st.booleans())
def test_fit_routing_tables_fit_or_are_refused_in_one_line(data, sample, quick_routing_fit, tmp_path_factory):
    """fit-routing --table on a changed copy of routing_public.csv: its header with 1-6 of its rows (the whole
    table fits in 12 s), each changed."""
    lines = table_lines("routing_public.csv")
    head = next(i for i, line in enumerate(lines) if line.startswith("row_id"))
    rows = data.draw(st.lists(st.sampled_from(lines[head + 1:]), min_size=1, max_size=6))
    body, note = mutate_lines(data.draw, lines[head:head + 1] + rows, copies=(2, 10))
    file = tmp_path_factory.mktemp("r") / "routing.csv"
    file.write_text("\n".join(lines[:head] + body) + "\n", encoding="utf-8")
    invoke("fit-routing", ["fit-routing", "--table", str(file), "--out", str(file.with_name("fit.yaml"))] +
           ([] if sample else ["--no-sample"]), note=f"{len(rows)} rows; {note}", files=[str(file)])


@st.composite
def route_traces(draw) -> tuple[str, str, str]:
    """(text, what, why it cannot be fitted or ''): a small route trace (CSV or JSONL; 1-4 layers, 4-32 experts,
    1-3 requests of 2-12 tokens), some layer ids far or negative, a request, position or expert id negative, lines
    changed."""
    layers, experts = draw(st.integers(1, 4)), draw(st.sampled_from([4, 8, 32]))
    top_k = draw(st.integers(1, min(4, experts)))
    far = draw(st.sampled_from([None, None, 150, 10**6, -1]))
    negative = draw(st.sampled_from([None, None, None, "request", "pos", "expert"]))  # one id of the first row < 0
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rows = []
    for r in range(draw(st.integers(1, 3))):
        for t in range(draw(st.integers(2, 12))):
            for layer in range(layers):
                rows.append((r, t, far if far is not None and layer == layers - 1 else layer,
                             rng.choice(experts, top_k, replace=False).tolist()))
    if negative:
        r, t, layer, ex = rows[0]
        rows[0] = (-1 if negative == "request" else r, -1 if negative == "pos" else t, layer,
                   [-1] + ex[1:] if negative == "expert" else ex)
    if draw(st.booleans()):
        lines = [json.dumps({"request": r, "pos": t, "layer": layer, "experts": ex}) for r, t, layer, ex in rows]
    else:
        lines = ["request,token,layer,experts"] + [f"{r},{t},{layer},{' '.join(map(str, ex))}" for r, t, layer, ex in
                                                   rows]
    if draw(st.booleans()):
        lines, done = mutate_lines(draw, lines, rounds=2)
    else:
        done = "as sampled"
    why = f"a negative {negative or 'layer'} id" if done == "as sampled" and (negative or far == -1) else ""
    return "\n".join(lines) + "\n", f"{layers} layers, {experts} experts, top-{top_k}, far layer {far}, negative " \
        f"{negative}: {done}", why


@fuzz(60)
@given(data=st.data(), experts=st.sampled_from([None, None, None, "1", "4", "64", "1000000"]))
def test_fit_routing_traces_fit_or_are_refused_in_one_line(data, experts, quick_routing_fit, tmp_path_factory):
    text, note, why = data.draw(route_traces())
    file = tmp_path_factory.mktemp("t") / "trace.csv"
    file.write_text(text, encoding="utf-8")
    invoke("fit-routing", ["fit-routing", "--trace", str(file), "--no-sample", "--model", "fuzz"] +
           (["--experts", experts] if experts else []), note=note, files=[str(file)],
           check=lambda out: [f"a trace with {why} fitted"] if why else [])


# --- a bounded sample: whole peak memory of a child process -----------------------------------------------------------

@fuzz(8)
@given(data=st.data())
def test_a_sample_of_file_cases_is_bounded_in_a_child_process(data, ggufs, tmp_path_factory):
    """A few of the cases above again in a child (python -m sim, 1 GiB of address space, killed at the hard cap):
    its whole peak RSS within 200 MiB and its time within 5 s."""
    folder = tmp_path_factory.mktemp("k")
    kind = data.draw(st.sampled_from(["gguf", "config", "bench", "loads"]))
    if kind == "gguf":
        blob, note, _ = data.draw(gguf_mutants(ggufs))
        (folder / "m.gguf").write_bytes(blob)
        args = ["model", str(folder / "m.gguf")]
    elif kind == "config":
        text, note = data.draw(config_mutants())
        (folder / "config.json").write_text(text, encoding="utf-8")
        args = ["model", str(folder / "config.json"), "--quant", "Q4_K_M"]
    elif kind == "bench":
        text, name, note = bench_text(data)
        (folder / name).write_text(text, encoding="utf-8")
        args = ["logs", str(folder / name), "--json"]
    else:
        lines, note = mutate_lines(data.draw, table_lines("public_loads.csv"))
        (folder / "t.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        args = ["fit-loads", path("scenarios", "public_loads.yaml"), "--table", str(folder / "t.csv")]
    bounded(args[0], args, note=note, files=[a for a in args if a.startswith(str(folder))])
