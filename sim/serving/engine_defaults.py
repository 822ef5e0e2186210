"""The defaults vLLM and SGLang give the settings a command line leaves out, by engine version, and where each
changed.

:data:`CHANGES` is the table: per engine and setting, each rule with the first release that has it and its source
(the file and function of the engine's own code, read in the released wheel of that version; the commit where the
wheel records one; a pull request where one is named). The rules were checked in these wheels (pip download
vllm==X / sglang==X): vLLM 0.6.6.post1, 0.7.0, 0.7.1, 0.7.3, 0.8.0-0.8.5, 0.9.0, 0.10.0-0.10.2, 0.11.0-0.15.0,
0.17.0-0.20.0, 0.26.0-0.34.0; SGLang 0.3.6, 0.4.0, 0.4.3-0.4.10, 0.5.1-0.5.20, 0.5.23 (the latest on PyPI, as
vLLM 0.34.0 is: :data:`CURRENT`). docs/research/vllm_defaults.md says the same with every version bracket.

:func:`resolve` applies them: the settings given win; each one left out takes its rule's value for the version, the
GPU (its VRAM, GiB, and name: vLLM's tiers read both) and the model (its context length, tokens). What a rule
cannot know before the KV pool is sized (SGLang's ``max_running_requests``) is :data:`FROM_POOL`, computed by the
scenario builder from the pool sim sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sim.core.errors import ScenarioError

CURRENT = {"vllm": "0.34.0", "sglang": "0.5.23"}  # latest releases on PyPI when checked
OLDEST = {"vllm": "0.6.6", "sglang": "0.3.6"}  # the oldest release checked: older ones are refused
NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
FROM_POOL = "from the KV pool"  # a value the scenario builder computes once the pool is sized
_VERSION = re.compile(r"v?([0-9]{1,3})\.([0-9]{1,3})(?:\.([0-9]{1,3}))?(?:[.+-]?(?:post|rc|dev|a|b)?[0-9a-z.+-]*)?")


def version_tuple(text: str, engine: str) -> tuple[int, int, int]:
    """``0.6.6.post1`` -> (0, 6, 6); a ScenarioError naming ``--engine-version`` for anything else."""
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ScenarioError("--engine-version", str(text)[:40], f"expected a {NAMES[engine]} release such as "
                            f"{CURRENT[engine]}")
    return int(match[1]), int(match[2]), int(match[3] or 0)


@dataclass(frozen=True)
class Era:
    """A default rule from release ``since`` on (until the next era of the same setting)."""

    since: str
    rule: str
    source: str

    @property
    def key(self) -> tuple[int, int, int]:
        return tuple(int(x) for x in self.since.split("."))  # type: ignore[return-value]


def _eras(*rows: tuple[str, str, str]) -> tuple[Era, ...]:
    return tuple(Era(*row) for row in rows)


_AU = "vllm/engine/arg_utils.py"
_SA = "python/sglang/srt/server_args.py"
_MH = "python/sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings"
_TIERS_V1 = "8,192 on a GPU of 70 GiB or more"
CHANGES: dict[str, dict[str, tuple[Era, ...]]] = {
    "vllm": {
        "engine": _eras(
            ("0.6.6", "V0; V1 only with VLLM_USE_V1=1", "vllm/envs.py VLLM_USE_V1 default '0' (0.6.6.post1-0.7.3)"),
            ("0.8.0", "V1; V0 with VLLM_USE_V1=0, or with --preemption-mode (V1 falls back to V0 for it)",
             "vllm/envs.py VLLM_USE_V1 default '1'; " + _AU + " _is_v1_supported_oracle (0.8.0-0.10.2)"),
            ("0.11.0", "V1 only; no --preemption-mode", _AU + " (0.11.0, commit f71952c1c: the flag is gone)")),
        "enable_chunked_prefill": _eras(
            ("0.6.6", "V0: on when max_model_len > 32,768 (a GPU, no sliding window, no speculative model, no LoRA), "
             "else off; V1: on, whatever the flag says", _AU + " create_engine_config (use_long_context), "
             "_override_v1_engine_args / _set_default_args_v1 (0.6.6.post1-0.11.0)"),
            ("0.12.0", "on; --no-enable-chunked-prefill turns it off",
             _AU + " _set_default_args, ModelConfig.is_chunked_prefill_supported (0.12.0, commit 4fd9d6a85)")),
        "enable_prefix_caching": _eras(
            ("0.6.6", "V0: off; V1: on", _AU + " __post_init__, _set_default_args_v1 (0.6.6.post1-0.10.2)"),),
        "max_num_batched_tokens": _eras(
            ("0.6.6", "V0: 2,048 with chunked prefill, else max(max_model_len, 2,048); V1: 2,048 (OpenAI server)",
             "vllm/config.py SchedulerConfig.__post_init__, " + _AU + " _override_v1_engine_args (0.6.6.post1)"),
            ("0.7.0", "V0 as before; V1: 8,192 on a GPU named H100 or H200, else 2,048",
             _AU + " (0.7.0-0.8.4; PR #12369)"),
            ("0.8.5", f"V0 as before; V1: {_TIERS_V1}, else 2,048", _AU + " _set_default_args_v1 (0.8.5)"),
            ("0.9.0", f"V0 as before; V1: {_TIERS_V1} that is not an A100, else 2,048",
             _AU + " _set_default_args_v1 (0.9.0; PR #17885)"),
            ("0.12.0", f"{_TIERS_V1} that is not an A100, else 2,048; with chunked prefill off at least max_model_len",
             _AU + " (0.12.0, commit 4fd9d6a85)"),
            ("0.28.0", f"16,384 on a GPU of 160 GiB or more; {_TIERS_V1} that is not an A100; else 2,048; with "
             "chunked prefill off at least max_model_len", _AU + " get_batch_defaults (0.28.0, commit 2cf0a6915)"),
            ("0.33.0", f"16,384 on a GPU of 160 GiB or more; {_TIERS_V1} that is neither an A100 nor a GB10; else "
             "2,048; with chunked prefill off at least max_model_len",
             _AU + " get_batch_defaults (0.33.0, commit 4ba787ec9)")),
        "max_num_seqs": _eras(
            ("0.6.6", "V0: 256; V1: 1,024", _AU + " __post_init__ (0.6.6.post1-0.7.3), _set_default_args_v1 (0.8.0)"),
            ("0.8.5", "V0: 256; V1: 1,024 on a GPU of 70 GiB or more, else 256", _AU + " _set_default_args_v1 (0.8.5)"),
            ("0.9.0", "V0: 256; V1: 1,024 on a GPU of 70 GiB or more that is not an A100, else 256",
             _AU + " _set_default_args_v1 (0.9.0; PR #17885)"),
            ("0.10.1", "V0: 256; V1: 1,024 on a GPU of 70 GiB or more that is not an A100, else 256; at most "
             "max_num_batched_tokens", _AU + " (0.10.1, commit aab549870)"),
            ("0.28.0", "1,024 on a GPU of 160 GiB or more, or of 70 GiB or more that is not an A100, else 256; at most "
             "max_num_batched_tokens", _AU + " get_batch_defaults (0.28.0, commit 2cf0a6915)"),
            ("0.33.0", "1,024 on a GPU of 160 GiB or more, or of 70 GiB or more that is neither an A100 nor a GB10, "
             "else 256; at most max_num_batched_tokens", _AU + " get_batch_defaults (0.33.0, commit 4ba787ec9)")),
        "gpu_memory_utilization": _eras(
            ("0.6.6", "0.9", _AU + " EngineArgs, vllm/config.py CacheConfig (0.6.6.post1-0.19.0)"),
            ("0.20.0", "0.92", "vllm/config/cache.py CacheConfig (0.20.0, commit b8160878f)"),
            ("0.34.0", "unset: the extensible KV cache takes what is free after CUDA graph capture (1.0)",
             "vllm/config/cache.py CacheConfig.resolved_gpu_memory_utilization (0.34.0, commit 62d4bc3c7)")),
        "block_size": _eras(
            ("0.6.6", "16 tokens", "vllm/platforms/cuda.py check_and_update_config (0.6.6.post1-0.33.0)"),
            ("0.34.0", "64 tokens", "vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE (0.34.0, commit 62d4bc3c7)")),
        "swap_space_gib": _eras(
            ("0.6.6", "4 GiB (V0's swap preemption)", _AU + " EngineArgs.swap_space (0.6.6.post1-0.17.0)"),
            ("0.18.0", "no --swap-space flag", _AU + " (0.18.0, commit bcf2be961)")),
        "preemption_mode": _eras(
            ("0.6.6", "recompute (V0 swaps only beam-search groups; V1 always recomputes)",
             "vllm/core/scheduler.py Scheduler._preempt (0.6.6.post1)"),),
        "max_model_len": _eras(("0.6.6", "the model's max_position_embeddings", _AU + " --max-model-len"),),
    },
    "sglang": {
        "mem_fraction_static": _eras(
            ("0.3.6", "by tensor parallel size: 0.88 (1), 0.87 (2), 0.85 (4), 0.82 (8), 0.79 (16)",
             _SA + " ServerArgs.__post_init__ (0.3.6)"),
            ("0.4.0", "by tensor parallel size: 0.88 (1), 0.87 (2), 0.85 (4), 0.81 (8), 0.79 (16)",
             _SA + " __post_init__ (0.4.0-0.4.5)"),
            ("0.4.6", "by tensor parallel size up to 81,920 MiB (0.88 at 1), above it (VRAM - 13 GiB) / VRAM",
             _SA + " __post_init__ (0.4.6)"),
            ("0.4.7", "by tensor parallel size up to 81,920 MiB, else 0.88; above 180,000 MiB 0.79; above 96 GiB "
             "min(f + 48 GiB (1 - f) / VRAM, (VRAM - 18 GiB) / VRAM)", _SA + " __post_init__ (0.4.7)"),
            ("0.4.8", "(VRAM - reserve) / VRAM; reserve (2.8 + tp / 10) GiB below 35 GiB, (9.5 + tp / 2) below 90, "
             "(12 + tp / 2) below 160, else 32 GiB; 2 GiB more with speculative decoding",
             _SA + " __post_init__ (0.4.8-0.5.2)"),
            ("0.5.3", "(VRAM - reserve) / VRAM; reserve 512 MiB + 1.5 MiB x max(chunked_prefill_size, 2,048) + 2 MiB "
             "x cuda_graph_max_bs + tp / 8 GiB, at least 10 GiB on a card above 60 GiB; + 2 GiB with speculative "
             "decoding (6 GiB STANDALONE, none NGRAM)", _SA + " _handle_gpu_memory_settings (0.5.3-0.5.9)"),
            ("0.5.10", "(VRAM - reserve) / VRAM; reserve as 0.5.3's + 8 MiB per piecewise CUDA graph size (captured by "
             "default up to chunked_prefill_size); 4 GiB with EAGLE-type drafts", _SA + " _handle_gpu_memory_settings, "
             "disable_piecewise_cuda_graph = False (0.5.10-0.5.13)"),
            ("0.5.14", "(VRAM - reserve) / VRAM; reserve 512 MiB + 1.5 MiB x max(chunked_prefill_size, 2,048) + "
             "2 MiB x cuda_graph_max_bs + tp / 8 GiB + 8 MiB per prefill CUDA graph size, at least 10 GiB on a "
             "card above 60 GiB; no speculative-decoding reserve",
             _SA + " _handle_gpu_memory_settings (0.5.14-0.5.19); " + _MH + " (0.5.20, 0.5.23)")),
        "chunked_prefill_size": _eras(
            ("0.3.6", "8,192 tokens; 2,048 below 25,000 MiB", _SA + " __post_init__ (0.3.6-0.4.6)"),
            ("0.4.7", "16,384 above 180,000 MiB; 2,048 below 25,000 MiB; else 8,192", _SA + " __post_init__ (0.4.7)"),
            ("0.4.8", "2,048 below 35 GiB, 8,192 below 160 GiB, else 16,384", _SA + " __post_init__ (0.4.8-0.5.2)"),
            ("0.5.3", "2,048 below 35 GiB, 4,096 below 60, 8,192 below 160, else 16,384",
             _SA + " _handle_gpu_memory_settings (0.5.3-0.5.19)"),
            ("0.5.20", "4,096 below 60 GiB (2,048 below 20), 8,192 below 160, else 16,384", _MH + " (0.5.20, 0.5.23)")),
        "cuda_graph_max_bs": _eras(
            ("0.5.3", "8 below 20 GiB; 16 (80 at tp >= 4) below 35; 32 (160) below 60; 256 (512) below 160; else 512",
             _SA + " _handle_gpu_memory_settings (0.5.3, 0.5.4)"),
            ("0.5.5", "8 below 20 GiB; 24 (80 at tp >= 4) below 35; 32 (160) below 60; 256 (512) below 160; else 512",
             _SA + " _handle_gpu_memory_settings (0.5.5-0.5.19)"),
            ("0.5.20", "8 below 20 GiB; 48 (160 at tp >= 4) below 35; 32 (160) below 60; 256 (512) below 160; else "
             "512", _MH + " (0.5.20)"),
            ("0.5.23", "8 below 20 GiB; 48 (160 at tp >= 4) below 35; 32 (160) below 60; 256 (512) below 160; else "
             "512; at most max_running_requests when that is given", _MH + " (0.5.23)")),
        "max_num_seqs": _eras(
            ("0.3.6", "max_running_requests: min(max(2,048, min(4,096, pool tokens / context length x 512)), pool "
             "tokens / 2)", "python/sglang/srt/managers/tp_worker.py, model_executor/model_runner.py (0.4.0); "
             "srt/mem_cache/kv_cache_configurator.py resolve_max_num_reqs (0.5.23)"),),
        "scheduling_policy": _eras(("0.3.6", "lpm", _SA + " ServerArgs.schedule_policy (0.3.6-0.4.3)"),
                                   ("0.4.4", "fcfs", _SA + " ServerArgs.schedule_policy (0.4.4-0.5.23)")),
        "enable_prefix_caching": _eras(("0.3.6", "on (the radix cache; --disable-radix-cache turns it off)",
                                        _SA + " disable_radix_cache = False"),),
        "block_size": _eras(("0.3.6", "1 token (page_size)", _SA + " page_size = 1 (0.4.6); None resolved to 1 "
                                                                     "(0.4.10, 0.5.8)"),),
        "max_prefill_tokens": _eras(("0.3.6", "16,384 tokens", _SA + " max_prefill_tokens"),),
        "max_model_len": _eras(("0.3.6", "the model's max_position_embeddings", _SA + " context_length"),),
    },
}


def era(engine: str, key: str, version: tuple[int, int, int]) -> Era:
    """The rule of ``key`` in force at ``version`` (the last era whose release is not after it)."""
    eras = CHANGES[engine][key]
    chosen = eras[0]
    for e in eras:
        if e.key <= version:
            chosen = e
    return chosen


@dataclass(frozen=True)
class Gpu:
    """What the engines' default rules read of a card: its VRAM (GiB), its name and whether it is a GB10."""

    vram_gib: float
    name: str
    gb10: bool = False


@dataclass
class Resolved:
    """Every setting the scenario needs: ``values`` by key, ``sources`` each one's "from the command line (FLAG)"
    or "default of vLLM 0.34.0: RULE (SOURCE)", ``notes`` what an engine does with a flag that the line's reader
    should know."""

    engine: str
    version: str
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def default(self, key: str, value: Any, rule: Era | str) -> None:
        self.values[key] = value
        if isinstance(rule, Era):
            where = f"default of {NAMES[self.engine]} {self.version}: {rule.rule} ({rule.source})"
        else:
            where = f"default of {NAMES[self.engine]} {self.version}: {rule}"
        self.sources[key] = where


def _given(out: Resolved, settings: dict[str, Any], flags: dict[str, str], key: str) -> bool:
    if key not in settings:
        return False
    out.values[key] = settings[key]
    out.sources[key] = f"from the command line ({flags.get(key, key)})"
    return True


def _vllm(out: Resolved, v: tuple[int, int, int], s: dict[str, Any], flags: dict[str, str], gpu: Gpu,
          context: int, sliding: bool, env: dict[str, str]) -> None:
    """vLLM's rules (see :data:`CHANGES`)."""
    ch = CHANGES["vllm"]
    v1 = v >= (0, 8, 0)
    if v < (0, 11, 0):
        use_v1 = env.get("VLLM_USE_V1")
        if use_v1 in ("0", "1"):
            v1 = use_v1 == "1"
        if v1 and v >= (0, 8, 0) and "preemption_mode" in s:
            if use_v1 == "1":
                raise ScenarioError("command line", flags.get("preemption_mode", "--preemption-mode"),
                                    "vLLM's V1 engine does not support it and VLLM_USE_V1=1 forbids the fall-back")
            v1 = False
            out.notes.append("--preemption-mode: vLLM's V1 engine does not support it and falls back to V0")
    elif "preemption_mode" in s or "swap_space_gib" in s and v >= (0, 18, 0):
        key = "preemption_mode" if "preemption_mode" in s else "swap_space_gib"
        raise ScenarioError("command line", flags.get(key, key), f"not a flag of vLLM {out.version} (V1 only "
                            "recomputes a preempted sequence)")
    out.values["engine_mode"] = "V1" if v1 else "V0"
    out.sources["engine_mode"] = f"default of vLLM {out.version}: {era('vllm', 'engine', v).rule}" + (
        f" (VLLM_USE_V1={env['VLLM_USE_V1']} on the line)" if "VLLM_USE_V1" in env and v < (0, 11, 0) else "")
    if not _given(out, s, flags, "max_model_len") or s["max_model_len"] is None:
        out.default("max_model_len", context, era("vllm", "max_model_len", v))
    max_len = out.values["max_model_len"]
    # chunked prefill
    rule = era("vllm", "enable_chunked_prefill", v)
    if v1 and v < (0, 12, 0):
        if s.get("enable_chunked_prefill") is False:
            out.notes.append(f"{flags['enable_chunked_prefill']}: vLLM {out.version}'s V1 engine turns chunked "
                             "prefill on whatever the flag says")
        out.default("enable_chunked_prefill", True, rule)
    elif not _given(out, s, flags, "enable_chunked_prefill"):
        out.default("enable_chunked_prefill", (max_len > 32768 and not sliding) if not v1 else True, rule)
    if not _given(out, s, flags, "enable_prefix_caching"):
        out.default("enable_prefix_caching", v1, ch["enable_prefix_caching"][0])
    chunked = out.values["enable_chunked_prefill"]
    # the token budget and the sequences
    big, a100 = gpu.vram_gib >= 70, "a100" in gpu.name.lower()
    rule = era("vllm", "max_num_batched_tokens", v)
    if not v1:
        budget = 2048 if chunked else max(max_len, 2048)
    elif v < (0, 7, 0):
        budget = 2048
    elif v < (0, 8, 5):
        budget = 8192 if any(n in gpu.name.lower() for n in ("h100", "h200")) else 2048
    else:
        tier = big and (v < (0, 9, 0) or not a100) and not (gpu.gb10 and v >= (0, 33, 0))
        budget = 16384 if v >= (0, 28, 0) and gpu.vram_gib >= 160 else 8192 if tier else 2048
        if not chunked and v >= (0, 12, 0):
            budget = max(max_len, budget)
    if not _given(out, s, flags, "max_num_batched_tokens"):
        out.default("max_num_batched_tokens", budget, rule)
    rule = era("vllm", "max_num_seqs", v)
    if not v1:
        seqs = 256
    elif v < (0, 8, 5):
        seqs = 1024
    else:
        tier = big and (v < (0, 9, 0) or not a100) and not (gpu.gb10 and v >= (0, 33, 0))
        seqs = 1024 if tier or (v >= (0, 28, 0) and gpu.vram_gib >= 160) else 256
        if v >= (0, 10, 1):
            seqs = min(seqs, out.values["max_num_batched_tokens"])
    if not _given(out, s, flags, "max_num_seqs"):
        out.default("max_num_seqs", seqs, rule)
    rule = era("vllm", "gpu_memory_utilization", v)
    if not _given(out, s, flags, "gpu_memory_utilization"):
        out.default("gpu_memory_utilization", None if v >= (0, 34, 0) else 0.92 if v >= (0, 20, 0) else 0.9, rule)
    if not _given(out, s, flags, "block_size"):
        out.default("block_size", 64 if v >= (0, 34, 0) else 16, era("vllm", "block_size", v))
    if not _given(out, s, flags, "preemption_mode"):
        out.default("preemption_mode", "recompute", era("vllm", "preemption_mode", v))
    elif s["preemption_mode"] == "swap" and "swap_space_gib" not in s and v < (0, 18, 0):
        out.default("swap_space_gib", 4.0, era("vllm", "swap_space_gib", v))


def _sglang_chunk(v: tuple[int, int, int], mib: float) -> int:
    """SGLang's default chunked_prefill_size (tokens) on a card of ``mib`` MiB."""
    if v < (0, 4, 7):
        return 2048 if mib < 25000 else 8192
    if v < (0, 4, 8):
        return 16384 if mib > 180000 else 2048 if mib < 25000 else 8192
    if v < (0, 5, 3):
        return 2048 if mib < 35 * 1024 else 8192 if mib < 160 * 1024 else 16384
    small = 4096 if v >= (0, 5, 20) else 2048
    return 2048 if mib < 20 * 1024 else small if mib < 35 * 1024 else 4096 if mib < 60 * 1024 \
        else 8192 if mib < 160 * 1024 else 16384


def _sglang_graph_bs(v: tuple[int, int, int], mib: float, tp: int) -> int:
    """SGLang's default largest decode CUDA graph (sequences), 0.5.3 on."""
    if mib < 20 * 1024:
        return 8
    if mib < 35 * 1024:
        return (16 if v < (0, 5, 5) else 24 if v < (0, 5, 20) else 48) if tp < 4 else (80 if v < (0, 5, 20) else 160)
    if mib < 60 * 1024:
        return 32 if tp < 4 else 160
    return (256 if tp < 4 else 512) if mib < 160 * 1024 else 512


def _prefill_graph_sizes(max_tokens: int) -> int:
    """How many prefill (piecewise) CUDA graph token counts SGLang captures up to ``max_tokens``."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return sum(1 for n in sizes if n <= max_tokens)


def _sglang_fraction(v: tuple[int, int, int], mib: float, tp: int, chunk: int, max_prefill: int, graph_bs: int,
                     spec: str | None) -> float:
    """SGLang's default mem_fraction_static on a card of ``mib`` MiB (single node, no DP attention, text model)."""
    by_tp = ((16, 0.79), (8, 0.82 if v < (0, 4, 0) else 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
    table = next(f for n, f in by_tp if tp >= n)
    if v < (0, 4, 6):
        return table
    if v < (0, 4, 7):
        return table if mib <= 81920 else (mib - 13 * 1024) / mib
    if v < (0, 4, 8):
        f = table if mib <= 81920 else 0.88
        if mib > 180 * 1000:
            return 0.79
        if mib > 96 * 1024:
            return min(f + 48 * 1024 * (1 - f) / mib, (mib - 1024 * (20 if spec else 18)) / mib)
        return f * 0.95 if spec else f
    if v < (0, 5, 3):
        reserve = (2.8 + tp / 10) * 1024 if mib < 35 * 1024 else (9.5 + tp / 2) * 1024 if mib < 90 * 1024 \
            else (12 + tp / 2) * 1024 if mib < 160 * 1024 else 32 * 1024
        reserve += 2048 if spec else 0
        return round((mib - reserve) / mib, 3)
    tokens = chunk if chunk > 0 else max_prefill
    reserve = 512 + max(tokens, 2048) * 1.5 + graph_bs * 2 + tp / 8 * 1024
    if v >= (0, 5, 10) and chunk > 0:
        reserve += _prefill_graph_sizes(chunk) * 8
    if mib > 60 * 1024:
        reserve = max(reserve, 10 * 1024)
    if spec and v < (0, 5, 14):
        upper = spec.upper()
        reserve += 6 * 1024 if upper == "STANDALONE" else 0 if upper == "NGRAM" else \
            (4 if v >= (0, 5, 10) else 2) * 1024
    return round((mib - reserve) / mib, 3)


def _sglang(out: Resolved, v: tuple[int, int, int], s: dict[str, Any], flags: dict[str, str], gpu: Gpu,
            context: int, tp: int) -> None:
    """SGLang's rules (see :data:`CHANGES`)."""
    mib = gpu.vram_gib * 1024
    if not _given(out, s, flags, "max_model_len"):
        out.default("max_model_len", context, era("sglang", "max_model_len", v))
    if not _given(out, s, flags, "chunked_prefill_size"):
        out.default("chunked_prefill_size", _sglang_chunk(v, mib), era("sglang", "chunked_prefill_size", v))
    if not _given(out, s, flags, "max_prefill_tokens"):
        out.default("max_prefill_tokens", 16384, era("sglang", "max_prefill_tokens", v))
    chunk = out.values["chunked_prefill_size"]
    out.values["enable_chunked_prefill"] = chunk > 0
    out.sources["enable_chunked_prefill"] = f"chunked_prefill_size {'above 0' if chunk > 0 else '-1: off'}"
    if not _given(out, s, flags, "enable_prefix_caching"):
        out.default("enable_prefix_caching", True, era("sglang", "enable_prefix_caching", v))
    if not _given(out, s, flags, "block_size"):
        out.default("block_size", 1, era("sglang", "block_size", v))
    if not _given(out, s, flags, "scheduling_policy"):
        out.default("scheduling_policy", "fcfs" if v >= (0, 4, 4) else "lpm", era("sglang", "scheduling_policy", v))
    if v >= (0, 5, 3) and not _given(out, s, flags, "cuda_graph_max_bs"):
        bs = _sglang_graph_bs(v, mib, tp)
        if v >= (0, 5, 23) and "max_num_seqs" in s:
            bs = min(bs, s["max_num_seqs"])
        out.default("cuda_graph_max_bs", bs, era("sglang", "cuda_graph_max_bs", v))
    if not _given(out, s, flags, "mem_fraction_static"):
        spec = (s.get("speculative") or {}).get("method")
        fraction = _sglang_fraction(v, mib, tp, chunk, out.values["max_prefill_tokens"],
                                    out.values.get("cuda_graph_max_bs", 0), spec)
        out.default("mem_fraction_static", fraction, era("sglang", "mem_fraction_static", v))
    if not _given(out, s, flags, "max_num_seqs"):
        out.default("max_num_seqs", FROM_POOL, era("sglang", "max_num_seqs", v))


def resolve(engine: str, version: str, settings: dict[str, Any], flags: dict[str, str], *, gpu: Gpu,
            context_tokens: int, sliding_window: bool = False, env: dict[str, str] | None = None) -> Resolved:
    """Every setting of ``engine`` at ``version``: the line's ``settings`` (with the ``flags`` they were given by)
    and each left out from the version's rule for ``gpu`` and a model of ``context_tokens`` (its
    max_position_embeddings; ``sliding_window``: the model has one). Other given settings are kept as they are."""
    v = version_tuple(version, engine)
    if v < version_tuple(OLDEST[engine], engine):
        raise ScenarioError("--engine-version", version, f"expected {NAMES[engine]} {OLDEST[engine]} or later (the "
                            "oldest release whose defaults were checked)")
    out = Resolved(engine, version)
    if v > version_tuple(CURRENT[engine], engine):
        out.notes.append(f"{NAMES[engine]} {version} is newer than {CURRENT[engine]}, the latest release checked: "
                         f"its defaults are taken as {CURRENT[engine]}'s")
    tp = int(settings.get("tensor_parallel", 1))
    if engine == "vllm":
        _vllm(out, v, settings, flags, gpu, context_tokens, sliding_window, env or {})
    else:
        _sglang(out, v, settings, flags, gpu, context_tokens, tp)
    for key in settings:
        if key not in out.values:
            _given(out, settings, flags, key)
    if "tensor_parallel" not in out.values:
        out.default("tensor_parallel", 1, "1 GPU")
    return out


def table_rows() -> list[tuple[str, str, str, str, str]]:
    """(engine, setting, since, rule, source) for every era: the table the docs print."""
    return [(NAMES[engine], key, e.since, e.rule, e.source) for engine, keys in CHANGES.items()
            for key, eras in keys.items() for e in eras]

