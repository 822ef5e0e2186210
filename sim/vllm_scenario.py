"""A scenario of sim's dense continuous-batching engine (sim.dense) from a parsed vLLM or SGLang command line
(:mod:`sim.serving.cmdline`), catalog names and a model's config.json: what ``sim vllm`` runs or writes.

The model: ``--model PATH`` (a config.json or a folder holding one), else the line's MODEL when it is such a path
here, else the Hugging Face repository resolved through ``calibration/models/index.yaml``. Its geometry and weights
are sim's own reading of the config (:func:`sim.modelfiles.read_model_file`, :func:`sim.modelfiles.dense_fields`).
Weights per parameter: the checkpoint's ``torch_dtype`` under ``--dtype auto`` (bf16 / fp16: 2 bytes; an fp32
checkpoint is served at fp16, as both engines' ``auto`` does), ``--dtype`` otherwise (float32: 4 bytes);
``--quantization fp8``: 1 byte per weight plus one float32 scale per 128 x 128 block, embeddings and head at bf16;
``awq`` / ``gptq`` (and their ``_marlin`` kernels): 4 bits plus an fp16 scale and a 4-bit zero point per group of
128 weights (0.52 bytes per parameter), embeddings and head at the dtype; the checkpoint's own
``quantization_config`` when it has one. KV per token from the config at 2 bytes per value, halved for an fp8 KV
cache.

How the engines' memory rules map onto sim's pool (:mod:`sim.batching.pool`): vLLM's ``gpu_memory_utilization``
u is the scheduler's (the engine takes u x VRAM for weights, runtime and KV), its runtime (activations, CUDA graphs)
the 2 GiB the serving fidelity benchmark assumes (:data:`sim.batching.families.RUNTIME_GIB`); vLLM 0.34's unset
default (the extensible KV cache: everything free after CUDA graph capture) leaves it out, so the pool is what other
tenants, the weights and the runtime leave. SGLang's ``mem_fraction_static`` f is weights plus KV over the card's
memory: the runtime is (1 - f) x VRAM and the pool what is left, as SGLang's profiling finds it. The iteration
efficiencies and the per-iteration overhead are left to the engine: the card family's fitted efficiencies and the
server's overhead (:mod:`sim.batching.families`, ``iteration.server``).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.core.errors import ScenarioError, SimulationError
from sim.formats.hf_config import read_config
from sim.serving.cmdline import ServingCommand
from sim.serving.engine_defaults import CURRENT, FROM_POOL, NAMES, Gpu, Resolved, resolve

MODELS = Path(__file__).resolve().parents[1] / "calibration" / "models"
MACHINE = "box"
MAX_BUDGET = 1_000_000  # the scheduler's largest token budget (sim.config.engine.Scheduler)
_AWQ_GPTQ = {"awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "marlin": "gptq"}
_DTYPES = {"half": "F16", "float16": "F16", "bfloat16": "BF16", "float": "F32", "float32": "F32"}
KV_BYTES = {"auto": None, "float16": 2.0, "fp16": 2.0, "bfloat16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0,
            "fp8_e5m2": 1.0, "fp8_inc": 1.0}  # bytes per cached value; None: the model's dtype


@dataclass(frozen=True)
class Workload:
    """The requests: ``rate_per_s`` (open loop, Poisson arrivals) or ``clients`` (closed loop, no think time)."""

    requests: int = 200
    prompt: int = 1000  # tokens
    gen: int = 200  # tokens
    rate_per_s: float | None = 1.0
    clients: int | None = None


@dataclass
class Built:
    """The scenario dict and what the output says about it: each setting's source and the notes."""

    raw: dict[str, Any]
    resolved: Resolved
    model_file: str
    sources: dict[str, str] = field(default_factory=dict)  # derived values (weights, KV, runtime, iteration)
    notes: list[str] = field(default_factory=list)


def model_file(cmd: ServingCommand, given: str | None) -> str:
    """The config.json to read: ``given`` (``--model``), the line's MODEL when it is one here, else the file
    ``calibration/models/index.yaml`` names for the repository."""
    for path in (given, cmd.model):
        if path and (os.path.isfile(path) or os.path.isfile(os.path.join(path, "config.json"))):
            return path if os.path.isfile(path) else os.path.join(path, "config.json")
        if path is given and given:
            raise ScenarioError("--model", given, "expected a config.json (or a folder holding one)")
    if not cmd.model:
        raise ScenarioError("command line", "MODEL", "missing: the line names no model; give --model config.json")
    from sim.config.yaml_io import read_yaml

    index = read_yaml(str(MODELS / "index.yaml")).get("models", {})
    name = cmd.model.strip("/")
    found = index.get(name) or next((f for repo, f in index.items() if repo.lower() == name.lower()), None)
    if found is None:
        raise ScenarioError("command line", "MODEL", f"{cmd.model}: not in calibration/models/index.yaml (nor a "
                            "config.json here); give --model config.json")
    return str(MODELS / found)


def _shown(path: str) -> str:
    """``path`` relative to the working folder when inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _config(path: str) -> dict[str, Any]:
    """A model's config.json as a mapping (read by :func:`sim.formats.hf_config.read_config`); a one-line error when
    it is not a readable JSON file. What it holds is checked by :func:`read_geometry`."""
    doc = read_config(path, "--model")
    return doc if isinstance(doc, dict) else {}


def _context_tokens(cfg: dict[str, Any]) -> int:
    """The model's max_position_embeddings (a multimodal config's text_config first); 2,048 when it names none."""
    for part in (cfg.get("text_config"), cfg):
        if isinstance(part, dict) and isinstance(part.get("max_position_embeddings"), int):
            return int(part["max_position_embeddings"])
    return 2048


def read_geometry(path: str, dtype: str, quantization: str | None):
    """(geometry at a 2-byte KV, what the weights are in words) of the model in ``path`` as the engine loads it."""
    from sim.modelfiles import read_model_file

    cfg = _config(path)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    own = text.get("quantization_config") or cfg.get("quantization_config")
    checkpoint = str(text.get("torch_dtype") or text.get("dtype") or cfg.get("torch_dtype") or "bfloat16").lower()
    method = (quantization or "").lower()
    if method in ("", "none"):
        if own:
            return read_model_file(path), f"the checkpoint's own quantization_config ({own.get('quant_method')})"
        if dtype == "auto":
            quant = "F16" if checkpoint.endswith(("float32", "float")) else None
            words = "fp16, 2 bytes per parameter (an fp32 checkpoint under --dtype auto)" if quant else \
                f"the checkpoint's {checkpoint}, 2 bytes per parameter"
            return read_model_file(path, quant), words
        quant = _DTYPES[dtype]
        return read_model_file(path, quant), f"{quant}, {4 if quant == 'F32' else 2} bytes per parameter (--dtype)"
    if method == "fp8":
        return read_model_file(path, "FP8"), "fp8: 1 byte per weight and a float32 scale per 128 x 128 block, " \
            "embeddings and head bf16"
    if method in _AWQ_GPTQ:
        if own and str(own.get("quant_method", "")).lower() == _AWQ_GPTQ[method]:
            return read_model_file(path), f"the checkpoint's own {method} quantization_config"
        injected = dict(cfg, quantization_config={"quant_method": _AWQ_GPTQ[method], "bits": 4, "group_size": 128})
        with tempfile.TemporaryDirectory() as folder:
            copy = os.path.join(folder, "config.json")
            with open(copy, "w", encoding="utf-8") as fh:
                json.dump(injected, fh)
            geometry = read_model_file(copy)
        return geometry, f"{method}: 4 bits + an fp16 scale and a 4-bit zero per 128 weights (0.52 bytes per " \
            "parameter), embeddings and head at the dtype"
    if own:
        return read_model_file(path), f"the checkpoint's own quantization_config ({own.get('quant_method')})"
    raise ScenarioError("command line", "--quantization", f"{quantization}: expected fp8, awq or gptq (or a "
                        "checkpoint whose config.json has its quantization_config)")


def _gpu(gpu: str) -> tuple[dict[str, Any], Gpu]:
    from sim.catalog import gpu_entries

    card = gpu_entries().get(gpu)
    if card is None:
        raise ScenarioError("--gpu", gpu, "expected a catalog GPU type (sim catalog --kind gpus), e.g. a100_80gb_sxm")
    vram = float(card.get("vram_gib") or 0)
    return card, Gpu(vram, str(card.get("name", gpu)), gb10=gpu == "gb10")


def _refuse_unmodelled(cmd: ServingCommand, tp: int) -> None:
    for key, what in (("pipeline_parallel", "pipeline parallelism"), ("data_parallel", "data parallelism")):
        if int(cmd.settings.get(key, 1)) > 1:
            raise ScenarioError("command line", cmd.flags[key], f"{what} is not modelled yet (one engine, "
                                "tensor parallelism at most)")
    if tp > 1:
        from sim.config.engine import Engine

        if "tensor_parallel" not in Engine.model_fields:
            raise ScenarioError("command line", cmd.flags.get("tensor_parallel", "-tp"),
                                "tensor parallelism is not modelled yet")


def _notes(cmd: ServingCommand, r: Resolved) -> list[str]:
    """What the dense engine does not model of the settings read, one sentence each."""
    s, out = r.values, []
    spec = s.get("speculative")
    if spec:
        out.append(f"speculative decoding ({spec.get('method')}): read, not modelled by the dense engine (one token "
                   "per sequence per iteration)")
    if s.get("enforce_eager"):
        out.append("CUDA graphs off: read; the per-iteration overhead is the engine's (sim.batching.families), "
                   "graphs or not")
    if s.get("cpu_offload_gib"):
        out.append(f"--cpu-offload-gb {s['cpu_offload_gib']:g}: weights offloaded to the CPU are not modelled (all "
                   "in VRAM)")
    if s.get("enable_lora"):
        out.append("LoRA: read, not modelled")
    policy = s.get("scheduling_policy")
    if policy and policy not in ("fcfs",):
        out.append(f"scheduling policy {policy}: sim admits first come, first served")
    if s.get("preemption_mode") == "swap":
        out.append("swap preemption: a swapped sequence's KV crosses the host link both ways; the host's swap space "
                   "is not bounded")
    if cmd.engine == "sglang":
        out.append("SGLang's chunked_prefill_size is read as the iteration's token budget: sim mixes decode steps "
                   "and prefill chunks in one iteration" + ("" if s.get("enable_mixed_chunk") else
                                                            " (SGLang does so with --enable-mixed-chunk only)"))
    return out


def build(cmd: ServingCommand, *, gpu: str, gpus: int | None = None, host: str | None = None,
          model: str | None = None, version: str | None = None, workload: Workload = Workload(),
          seed: int | None = None, line: str = "") -> Built:
    """The scenario of ``cmd`` on ``gpus`` cards of catalog type ``gpu`` (default: the tensor-parallel degree),
    with an optional catalog ``host``, serving ``workload``."""
    card, info = _gpu(gpu)
    version = version or CURRENT[cmd.engine]
    tp = int(cmd.settings.get("tensor_parallel", 1))
    _refuse_unmodelled(cmd, tp)
    gpus = tp if gpus is None else gpus
    if gpus < tp:
        raise ScenarioError("--gpus", str(gpus), f"expected at least the tensor-parallel degree, {tp}")
    path = model_file(cmd, model)
    cfg = _config(path)
    geometry, weights_words = read_geometry(path, str(cmd.settings.get("dtype", "auto")),
                                            cmd.settings.get("quantization"))
    if geometry.is_moe:
        raise ScenarioError("command line", "MODEL", f"{cmd.model or path}: a model with routed experts; the dense "
                            "engine serves dense models only")
    r = resolve(cmd.engine, version, cmd.settings, cmd.flags, gpu=info, context_tokens=_context_tokens(cfg),
                sliding_window=bool(geometry.sliding_window), env=cmd.env)
    from sim.modelfiles import dense_fields

    fields = dense_fields(geometry)
    kv_type = str(r.values.get("kv_cache_dtype", "auto")).lower()
    if kv_type not in KV_BYTES:
        raise ScenarioError("command line", cmd.flags.get("kv_cache_dtype", "--kv-cache-dtype"),
                            f"{kv_type}: expected one of {', '.join(KV_BYTES)} (other KV types are not modelled)")
    kv_bytes = KV_BYTES[kv_type] or 2.0
    if kv_bytes != 2.0:
        fields["dense"]["kv_kib_per_token"] = float(f"{fields['dense']['kv_kib_per_token'] * kv_bytes / 2:.6g}")
    max_len = int(r.values["max_model_len"])
    if workload.prompt + workload.gen > max_len:
        raise ScenarioError("--prompt", str(workload.prompt), f"--prompt + --gen ({workload.prompt + workload.gen} "
                            f"tokens) exceeds max_model_len {max_len}: {NAMES[cmd.engine]} refuses such requests")
    from sim.llamacpp.machine import model_key

    key = model_key(path)
    raw = _scenario(cmd, r, card, gpu, gpus, host, key, fields, workload, seed, line)
    built = Built(raw, r, path)
    built.sources.update({
        "weights": f"{fields['weights_gib']:.4g} GiB: {weights_words} (sim's reading of {_shown(path)})",
        "KV cache": f"{fields['dense']['kv_kib_per_token']:.4g} KiB per token: {kv_bytes:g} "
                    f"byte{'s' * (kv_bytes != 1)} per value (kv_cache_dtype {kv_type})",
        "runtime": f"{raw['machines'][MACHINE]['engine']['runtime_gib']:.4g} GiB per GPU: " + (
            "1 - mem_fraction_static of the card's VRAM (activations, CUDA graphs)" if cmd.engine == "sglang" else
            "assumed (activations, CUDA graphs; sim.batching.families.RUNTIME_GIB)"),
        "iteration costs": f"the card family's fitted efficiencies and {NAMES[cmd.engine]}'s per-iteration overhead "
                           "(sim.batching.families; the run says which)"})
    built.notes = r.notes + _notes(cmd, r)
    _size_from_pool(built, cmd)
    return built


def _scheduler(cmd: ServingCommand, r: Resolved) -> dict[str, Any]:
    s = r.values
    chunked = bool(s["enable_chunked_prefill"])
    if cmd.engine == "vllm":
        budget = int(s["max_num_batched_tokens"])
    else:
        chunk = int(s["chunked_prefill_size"])
        budget = chunk if chunk > 0 else max(int(s["max_prefill_tokens"]), int(s["max_model_len"]))
    out: dict[str, Any] = {"max_num_batched_tokens": min(budget, MAX_BUDGET), "block_size": int(s["block_size"]),
                           "enable_chunked_prefill": chunked, "enable_prefix_caching": bool(s["enable_prefix_caching"]),
                           "preemption_mode": s.get("preemption_mode", "recompute")}
    if s.get("max_num_seqs") not in (None, FROM_POOL):
        out["max_num_seqs"] = int(s["max_num_seqs"])
    if cmd.engine == "vllm" and s.get("gpu_memory_utilization") is not None and "kv_cache_memory_bytes" not in s:
        out["gpu_memory_utilization"] = float(s["gpu_memory_utilization"])
    if s.get("num_gpu_blocks_override"):
        out["num_gpu_blocks_override"] = int(s["num_gpu_blocks_override"])
    elif s.get("max_total_tokens"):
        out["num_gpu_blocks_override"] = max(1, int(s["max_total_tokens"]) // int(s["block_size"]))
    return out


def _scenario(cmd: ServingCommand, r: Resolved, card: dict[str, Any], gpu: str, gpus: int, host: str | None,
              key: str, fields: dict[str, Any], workload: Workload, seed: int | None, line: str) -> dict[str, Any]:
    from sim.batching.families import RUNTIME_GIB
    from sim.config.operator_profiles import profile_for

    s = r.values
    slot = {} if card.get("unified") else {"slot_gen": card.get("pcie_max_gen") or 4, "slot_lanes": 16}
    machine: dict[str, Any] = {}
    if host:
        machine["host"] = {"type": host}
    machine["gpus"] = {f"gpu{i}": {"type": gpu} | slot for i in range(gpus)}
    runtime = RUNTIME_GIB if cmd.engine == "vllm" else round((1 - float(s["mem_fraction_static"])) *
                                                             float(card.get("vram_gib") or 0), 4)
    engine: dict[str, Any] = {"model": key, "gpu": "gpu0"}
    if int(s.get("tensor_parallel", 1)) > 1:
        engine["tensor_parallel"] = int(s["tensor_parallel"])
    engine |= {"runtime_gib": runtime, "iteration": {"server": cmd.engine}, "scheduler": _scheduler(cmd, r)}
    if s.get("kv_cache_memory_bytes"):
        engine["iteration"]["kv_pool_gib"] = float(f"{int(s['kv_cache_memory_bytes']) / 2**30:.6g}")
    dense = fields.get("dense") or {}
    per_param = float(fields.get("weights_gib", 0)) * 2**30 / max(float(dense.get("params_b", 0)) * 1e9, 1.0)
    if 1.9 < per_param < 2.1:  # 16-bit weights, as the profiles were measured (the KV geometry checks the KV's)
        profile = profile_for(gpu, int(dense.get("layers", 0)), int(dense.get("hidden", 0)),
                              float(dense.get("kv_kib_per_token", 0)), int(s.get("tensor_parallel", 1)))
        if profile is not None:  # the linear layers as measured on this card for this model
            engine["iteration"]["operators"] = profile
    machine["engine"] = engine
    load: dict[str, Any] = {"kind": "closed", "clients": workload.clients, "think_s": 0} if workload.clients else \
        {"kind": "open", "rate_per_s": workload.rate_per_s, "arrival_law": "poisson"}
    raw: dict[str, Any] = {"name": cmd.engine, "description": f"From: {line.strip()[:400]}" if line else cmd.program}
    if seed is not None:
        raw["seed"] = seed
    raw |= {"models": {key: fields}, "machines": {MACHINE: machine},
            "serve": {"machine": MACHINE, "requests": workload.requests, "prompt_tokens": workload.prompt,
                      "output_tokens_min": workload.gen, "output_tokens_max": workload.gen, "workload": load}}
    return raw


def _size_from_pool(built: Built, cmd: ServingCommand) -> None:
    """What waits for the KV pool: SGLang's default max_running_requests and vLLM's start-up check that one
    sequence of max_model_len fits."""
    from sim.dense.setup import setup_dense
    from sim.llamacpp.machine import build_scenario

    setup = setup_dense(build_scenario(built.raw, "command line"), MACHINE)
    tokens, r = setup.kv_pool_tokens, built.resolved
    if r.values.get("max_num_seqs") == FROM_POOL:
        context = int(r.values["max_model_len"])
        seqs = min(max(2048, min(4096, int(tokens / context * 512))), max(1, tokens // 2))
        r.values["max_num_seqs"] = seqs
        r.sources["max_num_seqs"] = r.sources["max_num_seqs"].replace("pool tokens", f"{tokens:,} pool tokens", 1)
        built.raw["machines"][MACHINE]["engine"]["scheduler"]["max_num_seqs"] = min(seqs, 4096)
    max_len = int(r.values["max_model_len"])
    if cmd.engine == "vllm" and tokens < max_len:
        raise SimulationError(f"vLLM refuses to start: the KV pool holds {tokens:,} tokens, fewer than max_model_len "
                              f"{max_len:,} (one sequence of the model's length must fit); lower --max-model-len or "
                              "give the engine more memory")
