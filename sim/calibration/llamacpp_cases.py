"""The public llama-bench tables as runs sim can simulate: one :class:`Case` per measured number.

The tables (calibration/public/{offload_sweeps,backends_llamabench,depth_sweeps_cuda,moe_full_gpu_consumer,
unified_memory_llamabench}.csv, verbatim copies with every row's source) give, per row, a machine, a model, llama.cpp's
flags and what llama-bench or llama-sweep-bench measured: prompt (pp) and generation (tg) tok/s at a context depth,
sometimes the VRAM used. calibration/llamacpp_setups.yaml says what each setup is in sim's terms (catalog GPU and
host, backend, model and quant, the flags the columns lack, what it assumes), or why a row cannot be expressed.
calibration/models/index.yaml names each model's config file.
"""

from __future__ import annotations

import os
import re
from typing import Any

from sim.calibration.llamacpp_case import Case, CaseTable
from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError
from sim.formats.llama_bench_tables import BenchTableRow, read_bench_table

TABLES = ("offload_sweeps.csv", "backends_llamabench.csv", "depth_sweeps_cuda.csv", "moe_full_gpu_consumer.csv",
          "unified_memory_llamabench.csv", "unified_memory_concurrency.csv")
BATCHED = "unified_memory_concurrency.csv"  # its llama-batched-bench rows (serving sweeps: sim.fidelity.concurrency)
SETUPS = os.path.join("calibration", "llamacpp_setups.yaml")
MODELS = os.path.join("calibration", "models", "index.yaml")
def row_backend(text: str | None) -> tuple[str | None, str | None]:
    """The backend (and for Vulkan its cooperative-matrix kind) a row's ``backend`` column names, or None."""
    t = (text or "").lower()
    if not t:
        return None, None
    if "vulkan" in t:
        if "coopmat2" in t or "nv_coopmat" in t:
            return "vulkan", "coopmat2"
        if "no coopmat" in t or "scalar" in t or "matrix cores: none" in t:
            return "vulkan", "none"
        if "coopmat" in t:
            return "vulkan", "coopmat"
        return "vulkan", None
    for key, name in (("rocm", "hip"), ("hip", "hip"), ("metal", "metal"), ("sycl", "sycl"), ("opencl", "opencl"),
                      ("cuda", "cuda")):
        if key in t:
            return name, None
    if t.startswith("cpu"):
        return "cpu", None
    return None, None


def row_settings(row: BenchTableRow) -> dict:
    """llama.cpp settings a table row's own columns give."""
    s: dict[str, Any] = {}
    if row.ngl is not None:
        s["n_gpu_layers"] = 0 if row.ngl < 0 else row.ngl
    elif row.ngl_text.strip().lower().startswith("all"):
        s["n_gpu_layers"] = 999
    if row.n_cpu_moe_text.strip().lower() == "all":
        s["cpu_moe"] = True
    elif row.n_cpu_moe is not None:
        s["n_cpu_moe"] = row.n_cpu_moe
    for v, key in ((row.ubatch, "ubatch_size"), (row.batch, "batch_size")):
        if v:
            s[key] = v
    if row.cpu_threads_used:
        s["threads"] = row.cpu_threads_used
    kv = row.kv_type.lower()
    types = re.findall(r"\b(f16|f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl)\b", kv)
    if len(types) >= 2:
        s["cache_type_k"], s["cache_type_v"] = types[0], types[1]
    elif len(types) == 1:
        s["cache_type_k"] = s["cache_type_v"] = types[0]
    fa = row.flash_attn.strip().lower()
    if fa.startswith(("1", "on", "true", "yes")):
        s["flash_attn"] = True
    elif fa.startswith(("0", "off", "false", "no")):
        s["flash_attn"] = False
    if row.engine.lower().startswith("ik_llama"):
        s["build"] = "ik_llama.cpp"
    return s


def _scenario(setup: str, machine_spec: dict, model_file: str, model: dict, source: str, backend: str,
              vulkan: str | None) -> Scenario:
    """The scenario of one setup's machine running one model (``machine_spec``: the setup's machine with a row's
    changes)."""
    from sim.catalog import gpu_entries, host_entries
    from sim.config.defaults import fill_defaults
    from sim.config.load import validate

    m = machine_spec
    fields = {k: v for k, v in (m.get("host_fields") or {}).items() if v is not None}
    card = gpu_entries().get(m.get("gpu") or "", {})
    if m.get("host") in host_entries():
        host: dict[str, Any] = {"type": m["host"]} | fields
    elif card.get("unified"):  # the CPU side of a unified chip the catalog has no host entry for: its one memory
        # pool; its core count is not known, which costs nothing while every layer runs on the GPU (a run that
        # computes on the CPU then fails: the host's clock and FLOPs per cycle are not known either)
        host = {"dram_gbps": card["hbm_gbps"], "cores": 1} | fields
    else:
        raise ScenarioError(source, f"setups.{setup}.machine.host", f"{m.get('host')!r}: not a catalog host")
    if m.get("os", "linux") != "linux":
        host["os"] = m["os"]
    gpus: dict[str, Any] = {}
    if m.get("gpu") not in (None, "none") and int(m.get("gpus", 1) or 0) > 0:
        gen = m.get("slot_gen") or card.get("pcie_max_gen") or 4
        lanes = m.get("slot_lanes") or card.get("pcie_max_lanes") or 16
        for i in range(int(m.get("gpus", 1))):
            gpus[f"gpu{i}"] = {"type": m["gpu"], "reserved_gib": m.get("reserved_gib") or 0.0} | \
                ({} if card.get("unified") else {"slot_gen": gen, "slot_lanes": lanes})
    entry: dict[str, Any] = {"file": model_file}
    if model.get("quant"):
        entry["quant"] = model["quant"]
    if model.get("file_gib"):
        entry["weights_gib"] = model["file_gib"]
    llama: dict[str, Any] = {"backend": backend}
    if vulkan:
        llama["vulkan_matrix"] = vulkan
    engine: dict[str, Any] = {"model": "m", "llamacpp": llama}
    if gpus:
        engine["gpu"] = "gpu0"
    machine: dict[str, Any] = {"host": host, "gpus": gpus, "engine": engine}
    if card.get("unified") and gpus:  # what the GPU could map, as stated; else all a run that loaded could have had
        from sim.config.unified import OS_KEEPS_GIB

        pool = float(host.get("ram_gib") or card["vram_gib"])
        machine["unified_memory_gib"] = float(m.get("unified_gpu_gib") or pool - OS_KEEPS_GIB)
    if m.get("disk"):  # the disk mapped weights that do not stay resident are read from, by llama.cpp's mmap
        machine["disk"] = "disk"
        machine["loader"] = {"kind": "llamacpp_mmap" if llama.get("mmap", True) else "llamacpp_no_mmap"}
    raw: dict[str, Any] = {"name": f"llamabench-{setup}", "models": {"m": entry}, "machines": {"m": machine}}
    if m.get("disk"):
        raw["disks"] = {"disk": dict(m["disk"])}
    fill_defaults(raw, source)
    return validate(raw, source)


def _cannot_cost(case: Case) -> str:
    """Why the run cannot be costed whatever the parameters (the host's arithmetic unknown and the CPU computes),
    or "" when it can."""
    from sim.calibration.llamacpp_fit import build
    from sim.llamacpp.params import PRIORS, CostParams

    b = build(case, CostParams(dict(PRIORS)))
    return b.error if "arithmetic is not known" in b.error else ""


def read_cases(root: str, tables: tuple[str, ...] = TABLES) -> CaseTable:
    """Every expressible measured number of ``tables`` as a Case, and every other row with why."""
    from sim.config.yaml_io import read_yaml

    setups_path = os.path.join(root, SETUPS)
    setups = read_yaml(setups_path)["setups"]
    index = read_yaml(os.path.join(root, MODELS))["models"]
    out = CaseTable([])
    scenarios: dict[tuple, Scenario] = {}
    for table in tables:
        path = os.path.join(root, "calibration", "public", table)
        for row in read_bench_table(path):
            _row_cases(table, row, setups, index, setups_path, root, scenarios, out)
    return out


def _row_cases(table: str, row: BenchTableRow, setups: dict, index: dict, setups_path: str, root: str,
               scenarios: dict, out: CaseTable) -> None:
    setup, rid, source_id = row.setup_id, row.row_id, row.source_id
    if table == BATCHED and "batched-bench" not in row.engine:
        return  # a serving sweep under load: the concurrency domain's row

    def exclude(why: str) -> None:
        out.excluded.append((table, rid, source_id, setup, why))

    spec = setups.get(setup)
    if spec is None:
        raise ScenarioError(setups_path, f"setups.{setup}", f"missing: row {rid} of {table} names this setup")
    if spec.get("excluded"):
        return exclude(str(spec["excluded"]))
    source = (spec.get("sources") or {}).get(source_id) or {}
    row_spec = (spec.get("rows") or {}).get(rid) or {}
    if source.get("excluded"):
        return exclude(str(source["excluded"]))
    if row_spec.get("excluded"):
        return exclude(str(row_spec["excluded"]))
    model_key = f"{row.model}|{row.quant}"
    model = (spec.get("models") or {}).get(model_key)
    if model is None:
        return exclude(f"model {model_key!r} not mapped")
    if model.get("excluded"):
        return exclude(str(model["excluded"]))
    repo = model.get("model")
    file = index.get(repo)
    if file is None:
        return exclude(f"no published config of {repo} (calibration/models/index.yaml)")
    model_file = os.path.join(root, "calibration", "models", file)
    col_backend, col_vulkan = row_backend(row.backend)
    backend = row_spec.get("backend") or source.get("backend") or col_backend or spec.get("backend") or "cuda"
    vulkan = (row_spec.get("vulkan_matrix") or source.get("vulkan_matrix") or col_vulkan
              or spec.get("vulkan_matrix")) if backend == "vulkan" else None
    if vulkan == "unknown":
        vulkan = None  # the card's default (sim.llamacpp.backends.vulkan_matrix)
    machine_spec = dict(spec["machine"]) | dict(row_spec.get("machine") or {})
    if machine_spec.get("gpu") in (None, "none") or not machine_spec.get("gpus", 1):
        backend = "cpu"
    key = (setup, model_key, backend, vulkan, repr(sorted((row_spec.get("machine") or {}).items())))
    try:
        if key not in scenarios:
            scenarios[key] = _scenario(setup, machine_spec, model_file, model, setups_path, backend, vulkan)
            from sim.llamacpp.setup import placement_model

            entry = scenarios[key].models["m"]
            placement_model(entry.file, entry.quant, entry.weights_gib)  # the model's tensors can be read
            for g in scenarios[key].machines["m"].gpus.values():
                card = scenarios[key].gpus[g.type]
                if card.fp32_tflops is None:
                    raise ScenarioError(setups_path, f"gpus.{g.type}.fp32_tflops", "not published for this chip "
                                        "(the catalog entry's note says why): its arithmetic cannot be costed")
                if card.matrix_units not in (None, "none") and card.tflops is None and backend != "cpu":
                    raise ScenarioError(setups_path, f"gpus.{g.type}.tflops", f"its {card.matrix_units} matrix "
                                        "units' throughput is not published (the catalog entry's note says why): a "
                                        "prompt's matrix products cannot be costed")
    except ScenarioError as exc:
        scenarios.pop(key, None)
        return exclude(f"setup not expressible: {exc.path}: {exc.problem}")
    settings = row_settings(row) | dict(spec.get("settings") or {}) | dict(source.get("settings") or {}) \
        | dict(row_spec.get("settings") or {})
    if spec.get("build") == "ik_llama.cpp":
        settings.setdefault("build", "ik_llama.cpp")
    settings["backend"] = backend
    if vulkan:
        settings["vulkan_matrix"] = vulkan
    test_name = row.test_name
    if "sweep-bench" in test_name and row.ctx_tokens:
        settings["ctx_size"] = row.ctx_tokens
    try:
        lc = LlamaCpp(**settings)
    except Exception as exc:  # noqa: BLE001 - a mapping mistake in the setups file, said in one line
        raise ScenarioError(setups_path, f"setups.{setup}", f"row {rid}: settings {settings}: {exc}") from None
    if table == BATCHED:
        return _batched_cases(row, settings, setups_path, dict(table=table, row_id=rid, source=source_id, setup=setup,
                              grade=row.grade, scenario=scenarios[key], backend=backend,
                              memory_arch=str(row.memory_arch or "unified")), out)
    depth = row.n_depth_kv or 0
    lengths = row_spec.get("lengths") or {}
    common = dict(table=table, row_id=rid, source=source_id, setup=setup, grade=row.grade,
                  scenario=scenarios[key], settings=lc, depth=depth, backend=backend,
                  engine=lc.build, memory_arch=str(row.memory_arch or "discrete"))
    label = f"{row.model} {row.quant} {test_name}".strip()
    for quantity, col, n_col in (("pp_tok_s", "pp_tok_s", "n_prompt"), ("tg_tok_s", "tg_tok_s", "n_gen")):
        measured, tokens = getattr(row, col), getattr(row, n_col) or lengths.get(n_col)
        if measured is None:
            continue
        if not tokens:
            exclude(f"{quantity}: the test's length is not stated")
            continue
        case = Case(quantity=quantity, measured=measured, tokens=int(tokens), label=label, **common)
        why = _cannot_cost(case)
        if why:
            exclude(f"{quantity}: {why}")
            continue
        if quantity == "tg_tok_s" and lengths.get("tg_depth") is not None:
            case.depth = int(lengths["tg_depth"])
        out.cases.append(case)
    vram = row.vram_used_gib
    if vram is not None and not row_spec.get("vram_excluded"):
        kind = row_spec.get("vram") or source.get("vram") or spec.get("vram") or "total"
        out.cases.append(Case(quantity="vram_gib", measured=vram, vram=kind, label=label, **common))
    elif row.vram_used_gib_text and vram is None:
        exclude(f"vram_used_gib {row.vram_used_gib_text!r}: not one number")


def _batched_cases(row: BenchTableRow, settings: dict, setups_path: str, common: dict, out: CaseTable) -> None:
    """A llama-batched-bench row: S_TG and S_PP of B sequences of PP prompt and TG generated tokens, with the
    run's -c (max_model_len, n_kv_max) and the -b, -ub and -fa its notes give."""
    notes = row.notes
    for pattern, key in ((r"n_batch (\d+)", "batch_size"), (r"n_ubatch (\d+)", "ubatch_size")):
        m = re.search(pattern, notes)
        if m:
            settings[key] = int(m.group(1))
    m = re.search(r"flash_attn ([01])", notes)
    if m:
        settings["flash_attn"] = m.group(1) == "1"
    pp, tg, b, n_kv = row.input_tokens, row.output_tokens, row.concurrency, row.max_model_len
    if not (pp and tg and b and n_kv):
        out.excluded.append((BATCHED, row.row_id, common["source"], common["setup"],
                             "PP, TG, B or n_kv_max not stated"))
        return
    settings["ctx_size"] = n_kv
    settings.setdefault("parallel", b)
    try:
        lc = LlamaCpp(**settings)
    except Exception as exc:  # noqa: BLE001 - a mapping mistake in the setups file, said in one line
        raise ScenarioError(setups_path, f"setups.{common['setup']}", f"row {row.row_id}: settings {settings}: "
                            f"{exc}") from None
    label = f"{row.model} {row.quant} batched-bench PP {pp} TG {tg} B {b}"
    for quantity, col, tokens in (("bpp_tok_s", "pp_tok_s_aggregate", b * pp), ("btg_tok_s", "output_tok_s", b * tg)):
        measured = getattr(row, col)
        if measured is None:
            continue
        out.cases.append(Case(quantity=quantity, measured=measured, tokens=tokens, depth=pp, batch=b, label=label,
                              settings=lc, engine=lc.build, **common))
