"""Plausibility warnings: values that validate but contradict each other physically (a model's experts larger than
its weight files, a decode rate faster than the card's memory can feed it, a copy faster than its PCIe link). They
never stop a run: each is one line ``FILE: key.path: ...`` for the command line to print as a warning.

Every check is a lower bound on time (or an upper bound on size) that holds whatever the engine does, with a margin
for rounding in the figures a scenario quotes, so a warning means a typo or a unit mix-up, not a modelling choice.
One more says that a setting the scenario writes out cannot take effect: prefix caching turned on (explicitly: its
default is on, and a default says nothing) for a served workload that can never hit the cache.
"""

from __future__ import annotations

from sim.config.links import link_info
from sim.config.machines import Machine
from sim.config.models import ModelSpec
from sim.config.scenario import Scenario, engine_kind
from sim.core.errors import ScenarioError
from sim.core.units import GB, GIB, MIB
from sim.formats.inputs import check_file

MARGIN = 1.02  # figures are quoted to 3-4 digits: a bound is broken only by more than this
BITS_PER_PARAMETER = (1.0, 32.0)  # below 1-bit quantisation or above fp32: weights_gib and params_b disagree


def plausibility_warnings(scenario: Scenario, source: str) -> list[str]:
    """One line per implausible value of a validated scenario (with its calibrations), in the file's order."""
    found: list[tuple[str, str]] = []
    for name, spec in scenario.models.items():
        found += _model(f"models.{name}", spec)
    for name, m in scenario.machines.items():
        found += _machine(scenario, f"machines.{name}", m)
    found += _prefix_caching(scenario)
    known = scenario.acknowledged_warnings
    return [f"{source}: {path}: {what}" for path, what in found if path not in known]


def _model(p: str, spec: ModelSpec) -> list[tuple[str, str]]:
    """A model's geometry against its weight files: experts, dense weights, parameters, KV."""
    out: list[tuple[str, str]] = []
    if spec.moe is not None:
        moe = spec.moe
        layer_mib = spec.weights_gib * 1024 / moe.layers
        experts_gib = moe.layers * moe.experts_per_layer * moe.expert_mib / 1024
        total_gib = experts_gib + (moe.dense_gib or 0.0)
        if moe.expert_mib > layer_mib * MARGIN:
            out.append((f"{p}.moe.expert_mib", f"one expert ({moe.expert_mib:g} MiB) is larger than a whole layer "
                        f"(weights_gib / layers = {layer_mib:.4g} MiB): check the units (MiB) and weights_gib"))
        elif total_gib > spec.weights_gib * MARGIN:
            dense = f" + dense_gib {moe.dense_gib:g}" if moe.dense_gib else ""
            out.append((f"{p}.weights_gib", f"{spec.weights_gib:g} GiB of weights, but the model is larger: "
                        f"{moe.layers} layers x {moe.experts_per_layer} experts x {moe.expert_mib:g} MiB{dense} = "
                        f"{total_gib:.4g} GiB"))
    if spec.dense is not None:
        d = spec.dense
        bits = spec.weights_gib * GIB * 8 / (d.params_b * 1e9)
        lo, hi = BITS_PER_PARAMETER
        if not lo / MARGIN <= bits <= hi * MARGIN:
            out.append((f"{p}.weights_gib", f"{spec.weights_gib:g} GiB for {d.params_b:g} billion parameters is "
                        f"{bits:.3g} bits per parameter: expected {lo:g} to {hi:g} (check weights_gib and params_b)"))
        kv_max_kib = 2 * d.layers * d.hidden * 4 / 1024  # K and V of every layer, full width, 4-byte values
        if d.kv_kib_per_token > kv_max_kib * MARGIN:
            out.append((f"{p}.dense.kv_kib_per_token", f"{d.kv_kib_per_token:g} KiB per token is more than K and V "
                        f"of every layer at full width in fp32 (2 x {d.layers} x {d.hidden} x 4 bytes = "
                        f"{kv_max_kib:g} KiB)"))
    return out


def _bytes_per_token(spec: ModelSpec) -> float:
    """Bytes a single stream must read per generated token, at least: every weight of a dense model; the dense
    weights and the routed experts (top_k of each layer) of an MoE model."""
    if spec.moe is None:
        return spec.weights_gib * GIB
    moe = spec.moe
    return (moe.dense_gib or 0.0) * GIB + moe.layers * moe.top_k * moe.expert_mib * MIB


def _hbm_gbps(s: Scenario, m: Machine, gpus: list[str]) -> float | None:
    """Memory bandwidth of these GPUs together (GB/s), or None when a card's is not given."""
    rates = [s.gpus[m.gpus[g].type].hbm_gbps if g in m.gpus and m.gpus[g].type in s.gpus else None for g in gpus]
    return None if not rates or None in rates else float(sum(r for r in rates if r is not None))


def _machine(s: Scenario, p: str, m: Machine) -> list[tuple[str, str]]:
    """Rates of a machine against its hardware: decode rates, an engine's step costs, measured links."""
    out: list[tuple[str, str]] = []
    hbm = _hbm_gbps(s, m, list(m.gpus))  # all its cards at once: the loosest bound
    for model, rate in m.decode_tok_s.items():
        spec = s.models.get(model)
        if spec is None or hbm is None:
            continue
        per_step = 1 + (spec.moe.draft.tokens if spec.moe is not None else 0)  # drafts: tokens per weight read
        roof = hbm * GB / _bytes_per_token(spec) * per_step
        if rate > roof * MARGIN:
            out.append((f"{p}.decode_tok_s.{model}", f"{rate:g} tok/s is above the memory roofline of its GPUs: "
                        f"{_bytes_per_token(spec) / GB:.3g} GB read per token at {hbm:g} GB/s is at most "
                        f"{roof:.4g} tok/s"))
    e = m.engine
    spec = s.models.get(e.model) if e is not None else None
    if e is not None and spec is not None and spec.moe is not None and e.gpu in m.gpus:
        own = _hbm_gbps(s, m, [e.gpu])
        dense_s, expert_s = e.step.dense_s, e.step.gpu_expert_s
        if own is not None and dense_s is not None and expert_s is not None:
            moe = spec.moe
            step_s = dense_s + moe.layers * moe.top_k * expert_s
            read_gb = _bytes_per_token(spec) / GB
            read_s = read_gb / own
            if step_s * MARGIN < read_s:
                out.append((f"{p}.engine.step.dense_s", f"a decode step on the GPU (dense_s + layers x top_k x "
                            f"gpu_expert_s = {step_s:.4g} s) is shorter than reading its weights at the card's "
                            f"memory bandwidth ({read_gb:.3g} GB at {own:g} GB/s = {read_s:.4g} s)"))
    for gname, g in m.gpus.items():
        if g.type not in s.gpus or g.measured_link_gbps is None:
            continue
        link = link_info(s, m, gname)
        if g.measured_link_gbps > link.paper_gbps * MARGIN:
            out.append((f"{p}.gpus.{gname}.measured_link_gbps", f"{g.measured_link_gbps:g} GB/s is above the paper "
                        f"rate of its link (PCIe Gen{link.gen} x{link.lanes}: {link.paper_gbps:.3g} GB/s)"))
    if e is not None:
        out += _engine_links(s, p, m)
    return out


def _engine_links(s: Scenario, p: str, m: Machine) -> list[tuple[str, str]]:
    """Streaming and paging rates of an engine against the PCIe links they cross."""
    e = m.engine
    assert e is not None
    out: list[tuple[str, str]] = []
    pairs = [(f"{p}.engine.peers.{name}.paging_gbps", name, peer.paging_gbps) for name, peer in e.peers.items()]
    if e.prefill is not None:
        pairs.append((f"{p}.engine.prefill.stream_gbps", e.gpu, e.prefill.stream_gbps))
    for path, gname, rate in pairs:
        if rate is None or gname not in m.gpus or m.gpus[gname].type not in s.gpus:
            continue
        link = link_info(s, m, gname)
        if rate > link.paper_gbps * MARGIN:
            out.append((path, f"{rate:g} GB/s is above the paper rate of GPU {gname}'s link (PCIe Gen{link.gen} "
                        f"x{link.lanes}: {link.paper_gbps:.3g} GB/s), which these bytes cross"))
    return out


def _prefix_caching(s: Scenario) -> list[tuple[str, str]]:
    """Prefix caching written out as on for a served workload that can never hit: no shared system prompt, no chat
    sessions (or an engine that models no prefix cache of its own), no hand-set cached tokens, no agent context."""
    sv = s.serve
    m = s.machines.get(sv.machine) if sv is not None else None
    e = m.engine if m is not None else None
    sc = e.scheduler if e is not None else None
    if sv is None or e is None or sc is None or not sc.enable_prefix_caching \
            or "enable_prefix_caching" not in sc.model_fields_set:
        return []
    w = sv.workload
    if sv.cached_tokens or w.kind == "agent" or (w.kind == "trace" and _trace_has_cached(w.trace)):
        return []
    path = f"machines.{sv.machine}.engine.scheduler.enable_prefix_caching"
    if w.system_prompt_tokens or w.kind == "chat":
        kind = engine_kind(s, e)
        if kind == "dense":
            return []
        return [(path, f"on, but the {kind} engine models no prefix cache of its own (only the dense engine does): "
                 "its system prompts and chat histories are prefilled in full, and this workload hand-sets no "
                 "cached_tokens: 0 hits")]
    return [(path, "on, but this workload shares no prefix (no serve.workload.system_prompt_tokens, no chat "
             "sessions, no serve.cached_tokens" + (", no cached_tokens column in its trace" if w.kind == "trace"
                                                   else "") + "): every prompt is prefilled in full, 0 hits")]


def _trace_has_cached(path: str | None) -> bool:
    """The trace's header names a ``cached_tokens`` column (True when it cannot be read here: the run says why)."""
    if path is None:
        return True
    try:
        check_file(path, "serve.workload.trace", "a trace CSV")  # a regular file (never a FIFO), no NUL in its name
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            for _ in range(1000):  # comment lines before the header, each read up to 64 KiB
                line = fh.readline(65536)
                if not line:
                    return False
                if line.strip() and not line.startswith("#"):
                    return "cached_tokens" in line
    except (OSError, ScenarioError):
        return True
    return True
