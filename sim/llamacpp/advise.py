"""``sim advise``: the llama.cpp placements of a model on a machine, searched and ranked.

Every candidate is a set of llama.cpp flags (``--n-cpu-moe``, ``-ngl``, ``-ub``, the KV cache type, ``-np``): the
engine loads it (:mod:`sim.llamacpp.setup`: a card that cannot hold its buffers rules it out, or, with the driver's
sysmem fallback, makes it slow) and its llama-bench rates come from :mod:`sim.llamacpp.costs`. The best few are
printed for decode (tg at the context depth asked), for prefill (pp) and for a request mix (its prompt and its
generated tokens, per request), each with a 90% band, the VRAM and RAM used, and the flags to paste. Placements
whose weights the driver would move to shared system memory (Windows' sysmem fallback) are offered only when no
other placement loads.

The band comes from the fit's residuals on the setups kept out of it (calibration/llamacpp.yaml ``band``): the
5th and 95th percentiles of ``measured / simulated``. A measured run of the user's own (``anchor``) scales every
prediction of that test by ``measured / simulated`` at its placement; the band becomes the spread the fit shows
within one setup (``band_within``) when that is the narrower. A placement leaving a card less than ``margin_gib``
free is left out (the VRAM arithmetic is an estimate; llama.cpp's own ``--fit`` keeps a margin too).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from sim.config.llamacpp import LlamaCpp
from sim.config.scenario import Scenario
from sim.core.errors import ScenarioError, SimulationError
from sim.llamacpp.bench import bench_setup
from sim.llamacpp.params import BAND, CostParams

DEFAULT_BAND = BAND  # 90% bands of measured / simulated (calibration/llamacpp.yaml, sim.llamacpp.params.BAND)


@dataclass(frozen=True)
class Candidate:
    """One placement and what the engine does with it."""

    settings: LlamaCpp
    tg_tok_s: float  # decode of one sequence at the depth asked (tok/s); with parallel > 1: all sequences together
    pp_tok_s: float  # prompt processing (tok/s)
    request_s: float  # one request of the mix: its prompt, then its generated tokens (s)
    vram_gib: float
    ram_gib: float
    spill_gib: float  # beyond VRAM, in shared system memory (sysmem fallback)
    cpu_expert_layers: int

    all_layers: int = 0  # the model's layers + 1 (the output head): -ngl at least this is "every layer"
    quant: str = ""  # the model's quantization, when several were searched
    cpu_weight_share: float = 0.0  # share of the weights' bytes on the CPU (where the placement sits)

    def placement_key(self) -> tuple:
        """The flags that decide its rates: -ngl (every layer as one), --n-cpu-moe, -ot, the batch, the KV cache,
        -np, -fa and the threads (-c and the rest aside)."""
        s = self.settings
        ngl = min(s.n_gpu_layers, self.all_layers) if self.all_layers else s.n_gpu_layers
        flash = True if s.flash_attn == "auto" else s.flash_attn  # auto is on wherever the search puts -fa on
        return (ngl, s.n_cpu_moe, s.cpu_moe, tuple(s.override_tensor), min(s.ubatch_size, s.batch_size),
                s.cache_type_k, s.cache_type_v, s.parallel, flash, s.threads, s.threads_batch,
                tuple(s.tensor_split or ()))

    def flags(self) -> str:
        s = self.settings
        ngl = 99 if self.all_layers and s.n_gpu_layers >= self.all_layers and self.all_layers <= 99 else \
            s.n_gpu_layers
        parts = [f"-ngl {ngl}"]
        if s.n_cpu_moe:
            parts.append(f"--n-cpu-moe {s.n_cpu_moe}")
        if s.tensor_split:  # the fit's layer counts per card: without them llama.cpp splits by free memory
            parts.append("-ts " + ",".join(f"{v:g}" for v in s.tensor_split))
        if s.override_tensor:
            import shlex

            from sim.llamacpp.fit import merged_rules

            parts += [f"-ot {shlex.quote(rule)}" for rule in merged_rules(s.override_tensor)]
        parts += [f"-ub {s.ubatch_size}", f"-b {max(s.batch_size, s.ubatch_size)}"]
        if s.cache_type_k != "f16" or s.cache_type_v != "f16":
            parts += [f"-ctk {s.cache_type_k}", f"-ctv {s.cache_type_v}"]
        if s.parallel > 1:
            parts.append(f"-np {s.parallel}")
        parts += [f"-c {s.ctx_size}", "-fa on"]
        return " ".join(parts)


@dataclass
class Advice:
    candidates: list[Candidate]
    rejected: dict[str, str] = field(default_factory=dict)  # flags -> why it does not load
    band: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_BAND))
    anchor: dict[str, float] = field(default_factory=dict)  # test -> measured / simulated at the anchor's placement
    anchor_share: dict[str, float] = field(default_factory=dict)  # test -> the anchor's CPU weight share
    anchor_flags: dict[str, tuple] = field(default_factory=dict)  # test -> the anchor's Candidate.placement_key
    near: dict[str, list] = field(default_factory=dict)  # test -> [[distance, lo, hi], ...] (BAND_NEAR)

    def best(self, key: str, n: int = 3) -> list[Candidate]:
        """The best ``n`` placements by ``key``: ``tg``, ``pp`` (highest rate) or ``mix`` (shortest request); one per
        placement of the layers and experts (-ngl, --n-cpu-moe, -ot, -np), its best -ub and KV type; rates equal to
        three digits go to an f16 KV cache, then to less VRAM."""
        def quality(c: Candidate) -> bool:  # an f16 KV cache first among equals
            return c.settings.cache_type_k != "f16" or c.settings.cache_type_v != "f16"

        if key == "mix":
            ranked = sorted(self.candidates, key=lambda c: (float(f"{c.request_s:.3g}"), quality(c), c.vram_gib))
        else:
            attr = "tg_tok_s" if key == "tg" else "pp_tok_s"
            ranked = sorted(self.candidates, key=lambda c: (-float(f"{getattr(c, attr):.3g}"), quality(c),
                                                            c.vram_gib))
        out, seen = [], set()
        for c in ranked:
            s = c.settings
            place = (c.quant, s.n_gpu_layers, s.n_cpu_moe, tuple(s.override_tensor), tuple(s.tensor_split or ()),
                     s.parallel)
            if place not in seen:
                seen.add(place)
                out.append(c)
            if len(out) == n:
                break
        return out

    def scaled(self, c: Candidate, test: str) -> float:
        rate = c.tg_tok_s if test == "tg" else c.pp_tok_s
        return rate * self.anchor.get(test, 1.0)

    def band_of(self, c: Candidate, test: str) -> tuple[float, float]:
        """The 90% band of ``c``'s ``test`` rate: at an anchor's placement (the same flags) the spread of repeated
        runs, near it the spread held-out pairs show at that distance (CPU weight share apart), each only when
        narrower than the band for any placement (sim.fidelity.llamacpp.near_bands)."""
        lo, hi = self.band[test]
        if test in self.anchor_share and self.near.get(test):
            same = c.placement_key() == self.anchor_flags.get(test)
            d = -1.0 if same else abs(c.cpu_weight_share - self.anchor_share[test])
            nearer = [r for r in self.near[test] if r[0] < d - 1e-12]  # a band never narrower than a nearer one's
            row = next((r for r in self.near[test] if d <= r[0] + 1e-12), None)
            if row is not None:
                near_lo = min([row[1], *(r[1] for r in nearer)])
                near_hi = max([row[2], *(r[2] for r in nearer)])
                if near_hi / near_lo < hi / lo:
                    lo, hi = near_lo, near_hi
        return lo, hi

    def interval(self, c: Candidate, test: str) -> tuple[float, float]:
        lo, hi = self.band_of(c, test)
        rate = self.scaled(c, test)
        return rate * lo, rate * hi


def candidate_settings(base: LlamaCpp, moe_layers: int, layers: int, ubatches: tuple[int, ...] = (512, 1024, 2048),
                       kv_types: tuple[str, ...] = ("f16", "q8_0"), parallel: tuple[int, ...] = (1,),
                       ngl_steps: int = 8) -> list[LlamaCpp]:
    """The flags searched: every ``--n-cpu-moe`` from none to all MoE layers' experts on the CPU, every layer on the
    GPU (the flag counts blocks from the first, so a model whose first blocks are dense goes up to its block count);
    a layer split (``-ngl``, no CPU experts beyond what the split leaves) at ``ngl_steps`` points; each at every
    ubatch, KV type and slot count."""
    dense_first = layers - moe_layers
    counts = [0] + list(range(dense_first + 1, layers + 1))
    placements = [{"n_gpu_layers": layers + 1, "n_cpu_moe": n} for n in counts]
    step = max((layers + 1) // ngl_steps, 1)
    placements += [{"n_gpu_layers": ngl, "n_cpu_moe": 0} for ngl in range(0, layers + 1, step)]
    out = []
    for place, ub, kv, np_ in itertools.product(placements, ubatches, kv_types, parallel):
        out.append(base.model_copy(update=place | {"ubatch_size": ub, "batch_size": max(base.batch_size, ub),
                                                   "cache_type_k": kv, "cache_type_v": kv, "parallel": np_,
                                                   "flash_attn": True, "override_tensor": [], "cpu_moe": False}))
    return out


def evaluate(scn: Scenario, machine: str, settings: LlamaCpp, *, n_prompt: int, n_gen: int, depth: int,
             params: CostParams | None = None, margin_gib: float = 0.0) -> Candidate:
    """One placement's rates (raises SimulationError when it does not load, or leaves a card less than
    ``margin_gib`` free)."""
    st = bench_setup(scn, machine, settings, settings.ctx_size, params)
    m = scn.machines[machine]
    ram = m.host.ram_gib if m.host is not None else None
    if m.kind == "unified" and m.gpus:  # one pool: the CPU's buffers get what the GPU's leave
        from sim.config.unified import pool_gib

        ram = pool_gib(scn, m) - st.vram_gib()
    if ram is not None and st.ram_gib() > ram:
        raise SimulationError(f"CPU: {st.ram_gib():.2f} GiB does not fit in {ram:g} GiB of host RAM")
    for mem in st.memory:
        used = mem.weights > 0 or mem.kv > 0
        if used and mem.free is not None and mem.excess == 0 and mem.total > mem.free - margin_gib * 2**30:
            raise SimulationError(f"{mem.device}: {mem.total / 2**30:.2f} GiB of {mem.free / 2**30:.2f} GiB free "
                                  f"leaves less than the {margin_gib:g} GiB margin")
    e = st.engine
    ub = min(settings.ubatch_size, settings.batch_size)
    b = settings.parallel
    tg = b * n_gen / e.generate_s(n_gen, depth, batch=b) if n_gen else float("nan")
    pp = n_prompt / st.prompt.prompt_s(n_prompt, depth, ub) if n_prompt else float("nan")
    request = (st.prompt.prompt_s(n_prompt, depth, ub) if n_prompt else 0.0) + (e.generate_s(n_gen, depth + n_prompt)
                                                                        if n_gen else 0.0)
    spill = sum(m.excess for m in st.memory) / 2**30
    weights = sum(m.weights for m in st.memory)
    return Candidate(settings, tg, pp, request, st.vram_gib(), st.ram_gib(), spill, st.placement.cpu_expert_blocks(),
                     st.placement.model.blocks + 1, cpu_weight_share=st.memory[0].weights / weights if weights else 0.0)


def merged(advices: dict[str, Advice]) -> Advice:
    """One advice over several quantizations of a model (``advices``: quant -> its search), each candidate and
    rejection labelled with its quant."""
    out = Advice([])
    for quant, adv in advices.items():
        out.candidates += [replace(c, quant=quant) for c in adv.candidates]
        out.rejected |= {f"{quant}: {flags}": why for flags, why in adv.rejected.items()}
        out.band = adv.band
    return out


def fit_placements(scn: Scenario, machine: str, searched: list[LlamaCpp], margin_gib: float) -> list[LlamaCpp]:
    """What llama.cpp's --fit places for each -ub, KV type and -np searched, keeping ``margin_gib`` free: whole layers'
    experts and part of one more layer (-ot rules), which the --n-cpu-moe / -ngl grid cannot say; only those that
    differ from a grid placement."""
    from sim.llamacpp.fit import resolve

    out, seen = [], set()
    for s in searched:
        key = (s.ubatch_size, s.cache_type_k, s.cache_type_v, s.parallel)
        if key in seen or not scn.machines[machine].gpus:
            continue
        seen.add(key)
        ask = s.model_copy(update={"fit": True, "n_gpu_layers": -1, "n_cpu_moe": 0, "cpu_moe": False,
                                   "override_tensor": [], "tensor_split": None, "fit_target_mib": margin_gib * 1024})
        try:
            fitted, fit = resolve(scn, machine, ask)
        except SimulationError:
            continue
        if fit is not None and not fit.failed and fitted.override_tensor:
            out.append(fitted)
    return out


def advise(scn: Scenario, machine: str, *, n_prompt: int = 512, n_gen: int = 128, depth: int = 0, ctx: int = 8192,
           params: CostParams | None = None, anchor: dict[str, tuple[LlamaCpp, float]] | None = None,
           ubatches: tuple[int, ...] = (512, 1024, 2048), kv_types: tuple[str, ...] = ("f16", "q8_0"),
           parallel: tuple[int, ...] = (1,), band: dict[str, tuple[float, float]] | None = None,
           band_within: dict[str, tuple[float, float]] | None = None, margin_gib: float = 0.5,
           band_near: dict[str, list] | None = None) -> Advice:
    """Search the placements of the machine's model (module docstring). ``anchor``: test (``tg``/``pp``) -> (the
    settings it ran with, measured tok/s)."""
    m = scn.machines[machine]
    assert m.engine is not None and m.engine.llamacpp is not None
    base = m.engine.llamacpp.model_copy(update={"ctx_size": ctx})
    from sim.llamacpp.setup import placement_model

    spec = scn.models[m.engine.model]
    assert spec.file is not None
    g = placement_model(spec.file, spec.quant, spec.weights_gib).geometry
    out = Advice([], band=dict(band or DEFAULT_BAND))
    spilling = []
    searched = candidate_settings(base, g.moe_layers if g.is_moe else 0, g.layers, ubatches, kv_types, parallel)
    if not m.gpus:  # the CPU alone: every layer placement is the same one, -ngl 0
        searched = [s for s in searched if s.n_gpu_layers == 0 and not s.n_cpu_moe]
    for s in searched + fit_placements(scn, machine, searched, margin_gib):
        try:
            c = evaluate(scn, machine, s, n_prompt=n_prompt, n_gen=n_gen, depth=depth, params=params,
                         margin_gib=margin_gib)
        except SimulationError as exc:
            out.rejected[Candidate(s, 0, 0, 0, 0, 0, 0, 0).flags()] = str(exc)
            continue
        if math.isfinite(c.request_s):
            (spilling if c.spill_gib > 0 else out.candidates).append(c)
    if out.candidates:  # shared system memory only when nothing else loads: a trap, not a placement
        out.rejected |= {c.flags(): f"{c.spill_gib:.2f} GiB in shared system memory" for c in spilling}
    else:
        out.candidates = spilling
    for test, (settings, measured) in (anchor or {}).items():
        try:
            c = evaluate(scn, machine, settings.model_copy(update={"ctx_size": ctx}), n_prompt=n_prompt, n_gen=n_gen,
                         depth=depth, params=params)
        except SimulationError as exc:
            raise ScenarioError("--anchor", test, f"its placement does not load here: {exc}") from None
        rate = c.tg_tok_s if test == "tg" else c.pp_tok_s
        out.anchor[test] = measured / rate
        out.anchor_share[test] = c.cpu_weight_share
        out.anchor_flags[test] = c.placement_key()
        out.near[test] = list((band_near or {}).get(test, []))
        if band_within and test in band_within:  # narrower only when one setup's spread is narrower
            (lo, hi), (blo, bhi) = band_within[test], out.band[test]
            if hi / lo < bhi / blo:
                out.band[test] = band_within[test]
    return out
