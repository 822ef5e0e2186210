"""Cross-reference checks: what the schema alone cannot say (a key naming another entry, a value that depends on
another section), one checker per section of the scenario.

Each checker returns problems as ``(key path, value, expected)``; ``cross_reference_errors`` runs them in the order
of the file (names, loading, disks, machines, jobs, dispatch, serve, report), and loading reports the first.
"""

from __future__ import annotations

import difflib
from typing import Any

from sim.config.engine import Engine, StepCost
from sim.config.machines import Machine
from sim.config.messages import CALIBRATED, expected_one_of
from sim.config.models import ModelSpec
from sim.config.scenario import Scenario, engine_kind

Problem = tuple[str, Any, str]  # (key path, the value found or None, what was expected)

SLOT_POOL_KEYS = frozenset(("num_gpu_blocks_override", "block_size"))  # a scheduler's keys slots may give
MAX_CHUNKS = 100_000  # chunks per model load: beyond this a load is events without end


def cross_reference_errors(s: Scenario) -> list[Problem]:
    """Every problem the checkers find, in the order of the scenario's sections."""
    errs = _names(s) + _models(s) + _loading(s) + _disks(s)
    for name, m in s.machines.items():
        errs += _machine(s, name, m)
    return errs + _jobs(s) + _dispatch(s) + _serve(s) + _bench(s) + _report(s)


def _need(path: str, value: str, pool: dict, what: str) -> list[Problem]:
    """``value`` must be a key of ``pool``."""
    return [] if value in pool else [(path, value, expected_one_of(value, list(pool), what))]


def _names(s: Scenario) -> list[Problem]:
    """Entry names are single parts of a key path."""
    maps = {"disks": s.disks, "gpus": s.gpus, "models": s.models, "machines": s.machines, "jobs": s.jobs}
    maps.update({f"machines.{n}.gpus": m.gpus for n, m in s.machines.items()})
    return [(f"{where}.{key}", key, "a name without dots (dots separate the parts of a key path)")
            for where, entries in maps.items() for key in entries if "." in key or not key.strip()]


EXPERTS_OVER_WEIGHTS = 100.0  # layers x experts x expert_mib over this many times weights_gib: not a model


def _models(s: Scenario) -> list[Problem]:
    """Geometry that no model can have: one expert larger than all the weights, or routed experts together far
    larger than them (sim.config.plausibility warns of the merely implausible: an expert larger than a layer)."""
    errs: list[Problem] = []
    for name, spec in s.models.items():
        errs += _moe_geometry(f"models.{name}", spec)
    return errs


def _moe_geometry(p: str, spec: ModelSpec) -> list[Problem]:
    moe = spec.moe
    if moe is None:
        return []
    weights_mib = spec.weights_gib * 1024
    if moe.expert_mib > weights_mib:
        return [(f"{p}.moe.expert_mib", moe.expert_mib, f"at most the model's weights_gib ({spec.weights_gib:g} GiB "
                 f"= {weights_mib:g} MiB): one expert cannot be larger than all the weights (check the units, MiB)")]
    experts_mib = moe.layers * moe.experts_per_layer * moe.expert_mib
    if experts_mib > EXPERTS_OVER_WEIGHTS * weights_mib:
        return [(f"{p}.moe.expert_mib", moe.expert_mib, f"routed experts that fit in the weights: {moe.layers} layers "
                 f"x {moe.experts_per_layer} experts x {moe.expert_mib:g} MiB = {experts_mib / 1024:.4g} GiB is more "
                 f"than {EXPERTS_OVER_WEIGHTS:g} x weights_gib ({spec.weights_gib:g} GiB)")]
    return []


def _loading(s: Scenario) -> list[Problem]:
    chunk = s.loading.chunk_mib / 1024
    return [("loading.chunk_mib", s.loading.chunk_mib, f"at most {MAX_CHUNKS:,} chunks per model; {name} would need "
             f"{spec.weights_gib / chunk:,.0f}: raise chunk_mib")
            for name, spec in s.models.items() if spec.weights_gib / chunk > MAX_CHUNKS]


def _disks(s: Scenario) -> list[Problem]:
    return [(f"disks.{name}.read_gbps", None, CALIBRATED) for name, d in s.disks.items() if d.read_gbps is None]


def _machine(s: Scenario, name: str, m: Machine) -> list[Problem]:
    """A machine's disk and loader, its engine, its GPUs and the models it names."""
    p = f"machines.{name}"
    errs: list[Problem] = []
    if m.disk is not None:
        errs += _need(f"{p}.disk", m.disk, s.disks, "a disk")
        if m.loader.s_per_gb is None and m.loader.kind == "generic":
            errs.append((f"{p}.loader.s_per_gb", None, CALIBRATED))
    if m.engine is not None:
        errs += _engine(s, m, f"{p}.engine", m.engine)
    for gname, g in m.gpus.items():
        errs += _gpu(s, f"{p}.gpus.{gname}", g)
        card = s.gpus.get(g.type)
        if card is not None and card.unified != (m.kind == "unified"):
            errs.append((f"{p}.kind", m.kind, f"{'unified' if card.unified else 'discrete'}: {g.type} is "
                         + ("a unified-memory chip (its memory is the machine's)" if card.unified else
                            "a card behind PCIe")))
    if m.host is not None and m.host.type is not None:
        from sim.catalog import closest, host_entries

        if m.host.type not in host_entries():
            hint = closest("hosts", m.host.type)
            errs.append((f"{p}.host.type", m.host.type, "expected a host of the catalog (sim catalog --kind hosts "
                         "lists them)" + (f"; did you mean '{hint}'?" if hint else "")))
    for key in m.decode_tok_s:
        errs += _need(f"{p}.decode_tok_s.{key}", key, s.models, "a model")
    for i, key in enumerate(m.resident_models):
        errs += _need(f"{p}.resident_models.{i}", key, s.models, "a model")
    for i, key in enumerate(m.page_cache_models):
        errs += _need(f"{p}.page_cache_models.{i}", key, s.models, "a model")
    return errs


def _gpu(s: Scenario, p: str, g) -> list[Problem]:
    """A GPU names a card type (the scenario's or the catalog's), and its link trains no higher than card and slot
    allow."""
    from sim.catalog import closest, gpu_entries

    errs: list[Problem] = []
    if g.type not in s.gpus:
        hint = difflib.get_close_matches(str(g.type), [*s.gpus, *gpu_entries()], n=1) or \
            [c for c in [closest("gpus", str(g.type))] if c]
        errs.append((f"{p}.type", g.type, "expected a GPU type of the scenario's gpus or of the catalog (sim catalog "
                     "lists them)" + (f"; did you mean '{hint[0]}'?" if hint else "")))
    card = s.gpus.get(g.type)
    if card is None or card.pcie_max_gen is None:  # unknown (reported above), or a unified chip: no link to check
        return errs
    if g.slot_gen is None:
        return errs + [(f"{p}.slot_gen", None, "missing: the PCIe generation of the slot (only a unified-memory "
                        "chip has none)")]
    for what, neg, card_max, slot in (("gen", g.negotiated_gen, card.pcie_max_gen, g.slot_gen),
                                      ("lanes", g.negotiated_lanes, card.pcie_max_lanes, g.slot_lanes)):
        if neg is not None and neg > min(card_max, slot):
            errs.append((f"{p}.negotiated_{what}", neg,
                         f"a link cannot train above the card's maximum ({card_max}) or the slot's ({slot})"))
    return errs


def _engine(s: Scenario, m: Machine, p: str, e: Engine) -> list[Problem]:
    """An engine names a model and a GPU of its machine; then what its kind of engine needs."""
    errs = _need(f"{p}.model", e.model, s.models, "a model")
    if e.gpu is not None or e.llamacpp is None:  # llama.cpp: its first card, or the CPU alone
        errs += _need(f"{p}.gpu", e.gpu, m.gpus, "a GPU of this machine")
    spec = s.models.get(e.model)
    if spec is not None and engine_kind(s, e) is None:
        errs.append((f"{p}.model", e.model, "a model with an 'moe' or a 'dense' section (one of them)"))
    if spec is not None and spec.moe is not None and e.iteration is not None:
        errs.append((f"{p}.iteration", "...", "no 'iteration' section for an MoE model (its decode step cost is "
                     "under 'step')"))
    batching_keys = sorted(e.scheduler.model_fields_set - SLOT_POOL_KEYS) if e.scheduler is not None else []
    if spec is not None and spec.moe is not None and batching_keys and not e.batching:
        errs.append((f"{p}.scheduler", "...", f"batching: true beside {', '.join(batching_keys)} (a scheduler "
                     "batches; slots taking turns have none, only the KV pool of the engine's log: "
                     "num_gpu_blocks_override and block_size)"))
    if e.slots == "shared" and (e.batching or (spec is not None and spec.moe is None)):
        errs.append((f"{p}.slots", "shared", "split, or no key: only slots taking turns on an MoE engine share or "
                     "split a cache (batched sequences always share it)"))
    # a model naming neither section (or both) is reported above; its engine is checked as the default kind's
    return errs + ENGINE_CHECKS[engine_kind(s, e) or "moe"](s, m, p, e)


def _moe_engine(s: Scenario, m: Machine, p: str, e: Engine) -> list[Problem]:
    """An expert-cache engine: every step cost, its VRAM overhead, peers, a prompt rate, layer split, host RAM."""
    errs: list[Problem] = []
    moe = s.models[e.model].moe if e.model in s.models else None
    gpu = m.gpus.get(e.gpu)
    card = s.gpus.get(gpu.type) if gpu is not None else None
    if moe is not None and card is not None:  # (an unknown card is reported under the machine's gpus)
        mp = p.rsplit(".engine", 1)[0]
        errs += [(f"{mp}.{where}", None, f"missing: expected {expected}")
                 for where, expected in _missing_specs(e, moe, card, m, model=e.model, card_type=gpu.type)]
        for name, peer in e.peers.items():
            g = m.gpus.get(name)
            peer_card = s.gpus.get(g.type) if g is not None else None
            if g is not None and peer_card is not None and peer.expert_s is None and peer_card.hbm_gbps is None:
                errs.append((f"{p}.peers.{name}.expert_s", None, f"missing: expected a value (s, here or from a "
                             f"calibration file), or gpus.{g.type}.hbm_gbps to derive it"))
    if card is not None and e.power is not None and e.power.busy_w is None and card.board_power_w is None:
        errs.append((f"{p}.power.busy_w", None, f"missing: expected a value (W), or gpus.{gpu.type}.board_power_w"))
    if e.overhead_gib is None and moe is not None:
        if moe.dense_gib is None:
            errs.append((f"{p}.overhead_gib", None, f"a value, or models.{e.model}.moe.dense_gib to derive it"))
        elif e.context_tokens > 0 and moe.kv_kib_per_token is None:
            errs.append((f"models.{e.model}.moe.kv_kib_per_token", None,
                         f"a value: {p}.context_tokens needs it to derive the engine overhead"))
    for peer in e.peers:
        errs += _need(f"{p}.peers.{peer}", peer, m.gpus, "a GPU of this machine")
        if peer == e.gpu:
            errs.append((f"{p}.peers.{peer}", peer, "a GPU other than the engine's own"))
    card = s.gpus.get(gpu.type) if gpu is not None else None
    if e.prefill_tok_s is None and e.prefill is None and (card is None or card.tflops is None):
        errs.append((f"{p}.prefill_tok_s", None, "a prompt rate (tok/s), or a 'prefill' section, or the card's "
                     "tflops to derive prefill from"))
    if e.placement == "layer_split":
        errs += _layer_split(m, p, e)
    if e.host_ram_gib is not None and m.disk is None:
        errs.append((f"{p}.host_ram_gib", e.host_ram_gib, "a machine 'disk' to hold the experts beyond it"))
    return errs


def _missing_specs(e: Engine, moe, card, machine: Machine, model: str, card_type: str) -> list[tuple[str, str]]:
    """(dotted path within the machine, what is expected) of what an MoE engine's step costs cannot do without:
    a value in seconds, or the specs it is derived from (sim.moe.spec_costs)."""
    out: list[tuple[str, str]] = []
    s = e.step
    given = "a value (s, here or from a calibration file)"
    hbm = f"gpus.{card_type}.hbm_gbps"
    if s.dense_s is None and (moe.dense_gib is None or card.hbm_gbps is None):
        out.append(("engine.step.dense_s", f"{given}, or models.{model}.moe.dense_gib and {hbm} to derive it"))
    if s.gpu_expert_s is None and card.hbm_gbps is None:
        out.append(("engine.step.gpu_expert_s", f"{given}, or {hbm} to derive it"))
    host = machine.host
    from sim.catalog import host_entries

    unknown = host is not None and host.type is not None and host.type not in host_entries()  # reported apart
    if s.cpu_expert_s is None and not unknown and (host is None or host.paper_gbps is None):
        out.append(("engine.step.cpu_expert_s", f"{given}, or the machine's host (a catalog type, dram_gbps, or "
                    "channels and mt_s) to derive it"))
    return out


def _layer_split(m: Machine, p: str, e: Engine) -> list[Problem]:
    ls = e.layer_split
    if ls is None:
        return [(f"{p}.layer_split", None, "a 'layer_split' section for placement layer_split")]
    errs: list[Problem] = []
    if e.peers:
        errs.append((f"{p}.peers", list(e.peers), "no peers with placement layer_split (the cards hold layers, not "
                     "expert copies): --set " + p + ".peers={}"))
    for i, gname in enumerate(ls.gpus):
        errs += _need(f"{p}.layer_split.gpus.{i}", gname, m.gpus, "a GPU of this machine")
        if gname == e.gpu or gname in ls.gpus[:i]:
            errs.append((f"{p}.layer_split.gpus.{i}", gname, "a GPU other than the engine's and the others listed"))
    if len(ls.layer_s_scale) != len(ls.gpus):
        errs.append((f"{p}.layer_split.layer_s_scale", ls.layer_s_scale,
                     f"one value per GPU of layer_split.gpus ({len(ls.gpus)})"))
    return errs


def _dense_engine(s: Scenario, m: Machine, p: str, e: Engine) -> list[Problem]:
    """What a dense model's engine needs: an iteration section with every cost, and a card with its specs."""
    errs: list[Problem] = []
    # iteration costs left out take the card family's fitted efficiencies and the engine's overhead
    # (sim.batching.families)
    for field in ("peers", "layer_split", "host_ram_gib"):
        if getattr(e, field):
            errs.append((f"{p}.{field}", getattr(e, field), "nothing: a dense model has no experts to place"))
    if e.step != StepCost():
        errs.append((f"{p}.step", "...", "nothing: a dense model's iterations cost what its 'iteration' section "
                     "says"))
    if e.power is not None:
        errs.append((f"{p}.power", "...", "nothing: power is not modelled for a dense engine"))
    gpu = m.gpus.get(e.gpu)
    card = s.gpus.get(gpu.type) if gpu is not None else None
    if card is not None:
        for field in ("hbm_gbps", "tflops"):
            if getattr(card, field) is None:
                errs.append((f"gpus.{gpu.type}.{field}", None, "the card's spec (a dense engine's iterations are "
                             "bound by memory bandwidth and tensor throughput)"))
    return errs


def _llamacpp_engine(s: Scenario, m: Machine, p: str, e: Engine) -> list[Problem]:
    """A llama.cpp engine reads its model's tensors from a file and runs on the host's CPU and the machine's
    cards: a model file, the host's DRAM bandwidth and cores, every card's memory bandwidth, -ts per card."""
    errs: list[Problem] = []
    spec = s.models.get(e.model)
    lc = e.llamacpp
    assert lc is not None
    if spec is not None and spec.file is None:
        errs.append((f"models.{e.model}.file", None, "missing: a llama.cpp engine reads its model's tensors from a "
                     "config.json (with quant) or a .gguf file"))
    mp = p.rsplit(".engine", 1)[0]
    host = m.host
    if host is None or host.paper_gbps is None:
        errs.append((f"{mp}.host", None, "missing: a host type (sim catalog --kind hosts), or dram_gbps, or "
                     "channels and mt_s: the CPU reads its weights at the DRAM bandwidth"))
    elif host.cores is None and lc.threads is None:
        errs.append((f"{mp}.host.cores", None, "missing: the CPU's cores (or engine.llamacpp.threads)"))
    for key, g in m.gpus.items():
        card = s.gpus.get(g.type)
        if card is not None and card.hbm_gbps is None:
            errs.append((f"gpus.{g.type}.hbm_gbps", None, f"missing: the memory bandwidth (GB/s) of {key}'s card"))
    from sim.config.llamacpp import parse_rules
    from sim.core.errors import ScenarioError as RuleError

    try:
        # any backend's names here (CUDA0, ROCm0, Vulkan0, Metal, ...): the engine checks them against its own
        names = tuple(f"{prefix}{i}" for prefix in ("CUDA", "ROCm", "Vulkan", "SYCL", "OpenCL", "Metal")
                      for i in range(len(m.gpus))) + (("Metal",) if m.gpus else ())
        parse_rules(lc.override_tensor, "", f"{p}.llamacpp.override_tensor", names)
    except RuleError as exc:
        errs.append((exc.path, lc.override_tensor, exc.problem))
    if lc.tensor_split is not None and len(lc.tensor_split) != len(m.gpus):
        errs.append((f"{p}.llamacpp.tensor_split", lc.tensor_split, f"one share per GPU of the machine "
                     f"({len(m.gpus)})"))
    if lc.tensor_split is not None and (any(x < 0 for x in lc.tensor_split) or sum(lc.tensor_split) <= 0):
        errs.append((f"{p}.llamacpp.tensor_split", lc.tensor_split, "non-negative shares, not all zero"))
    return errs


# what each kind of engine needs of its section
ENGINE_CHECKS = {"moe": _moe_engine, "dense": _dense_engine, "llamacpp": _llamacpp_engine}


def _jobs(s: Scenario) -> list[Problem]:
    errs: list[Problem] = []
    for name, j in s.jobs.items():
        errs += _need(f"jobs.{name}.model", j.model, s.models, "a model")
        for i, key in enumerate(j.resident_on or []):
            errs += _need(f"jobs.{name}.resident_on.{i}", key, s.machines, "a machine")
        if j.resident_on is not None and s.dispatch.isolation != "per_job":
            errs.append((f"jobs.{name}.resident_on", j.resident_on, "only with dispatch.isolation: per_job"))
    return errs


def _dispatch(s: Scenario) -> list[Problem]:
    return [e for i, key in enumerate(s.dispatch.tie_break.order)
            for e in _need(f"dispatch.tie_break.order.{i}", key, s.machines, "a machine")]


def _serve(s: Scenario) -> list[Problem]:
    """The served machine has an engine; lengths, clients and workload fields agree with each other."""
    sv = s.serve
    if sv is None:
        return []
    errs = _need("serve.machine", sv.machine, s.machines, "a machine")
    machine = s.machines.get(sv.machine)
    if machine is not None and machine.engine is None:
        errs.append(("serve.machine", sv.machine, "a machine with an 'engine'"))
    w = sv.workload
    if sv.cached_tokens > sv.prompt_tokens:
        errs.append(("serve.cached_tokens", sv.cached_tokens, "at most prompt_tokens"))
    if w.kind == "open" and w.rate_per_s is None:
        errs.append(("serve.workload.rate_per_s", None, "a rate (requests/s) for an open-loop workload"))
    per_run = -(-sv.requests // min(w.runs, sv.requests))  # the largest run
    if w.kind in ("closed", "agent") and w.clients > per_run:
        errs.append(("serve.workload.clients", w.clients, f"at most the requests of a run ({sv.requests} requests "
                     f"in {w.runs} runs: {per_run}); more clients would never send anything (fewer "
                     "serve.workload.runs or more serve.requests)"))
    if sv.fidelity == "lookups" and machine is not None and machine.engine is not None and machine.engine.batching:
        errs.append(("serve.fidelity", "lookups", "counts with engine.batching (a batch step samples counts)"))
    if w.kind == "trace" and w.trace is None:
        errs.append(("serve.workload.trace", None, "a trace CSV path for a trace workload"))
    if w.lengths is not None and w.kind in ("trace", "agent"):
        errs.append(("serve.workload.lengths", w.lengths, f"no lengths table for a {w.kind} workload (its "
                     "requests' lengths come from the " + ("trace)" if w.kind == "trace" else "conversation)")))
    if sv.output_tokens_max < sv.output_tokens_min:
        errs.append(("serve.output_tokens_max", sv.output_tokens_max, "at least output_tokens_min"))
    return errs + _work(s)


def _bench(s: Scenario) -> list[Problem]:
    """A llama-bench run names a machine with a llama.cpp engine and sensible lengths."""
    b = s.bench
    if b is None:
        return []
    errs = _need("bench.machine", b.machine, s.machines, "a machine")
    machine = s.machines.get(b.machine)
    if machine is not None and (machine.engine is None or machine.engine.llamacpp is None):
        errs.append(("bench.machine", b.machine, "a machine whose engine has a 'llamacpp' section"))
    for key in ("n_prompt", "n_gen", "n_depth"):
        values = getattr(b, key)
        if any(v < 0 or v > 10_000_000 for v in values):
            errs.append((f"bench.{key}", values, "token counts from 0 to 10,000,000"))
    if not any(b.n_prompt) and not any(b.n_gen):
        errs.append(("bench.n_prompt", b.n_prompt, "at least one test: a prompt or a generated length above 0"))
    return errs


def _work(s: Scenario) -> list[Problem]:
    """The simulated work a served workload asks for: requests x (prompt + output tokens) at most
    ``serve.max_total_tokens``. Lengths are taken at their largest (uniform) or mean (exponential), capped by
    ``max_tokens`` and ``lengths_max_tokens``; an agent's prompt grows to ``turns x turn_tokens``; a trace or a
    lengths table is bounded by its file (its lengths are not known here)."""
    sv = s.serve
    assert sv is not None
    w = sv.workload
    if w.kind == "trace" or (w.lengths is not None and w.lengths_max_tokens is None):
        return []
    output = sv.output_tokens_mean if sv.output_tokens_mean is not None else sv.output_tokens_max
    output = min(output, sv.max_tokens) if sv.max_tokens is not None else output
    prompt = sv.prompt_tokens_mean if sv.prompt_tokens_mean is not None else sv.prompt_tokens
    if w.kind == "agent":
        prompt += w.turns * w.turn_tokens
    per_request = prompt + output
    if w.lengths is not None and w.lengths_max_tokens is not None:
        per_request = w.lengths_max_tokens
    total = sv.requests * per_request
    if total <= sv.max_total_tokens:
        return []
    return [("serve.requests", sv.requests, f"at most serve.max_total_tokens ({sv.max_total_tokens:,}) tokens of "
             f"simulated work: {sv.requests:,} requests x {per_request:,.0f} tokens (prompt + output) = {total:,.0f}; "
             "fewer requests or tokens, or raise the limit (--set serve.max_total_tokens=N)")]


def _report(s: Scenario) -> list[Problem]:
    return [] if s.report.load_model is None else _need("report.load_model", s.report.load_model, s.models, "a model")
