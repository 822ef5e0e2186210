"""llama.cpp's ``--fit``: the parameters the user left unset, chosen so that every card keeps a margin free.

Current builds run it before loading (on by default; ``--fit off`` skips it). Its steps, as ``common/fit.cpp`` of
ggml-org/llama.cpp has them (``common_params_fit_impl``):

1. Measure every device's allocations with the parameters as given. When each card would keep at least the target
   margin free (``--fit-target``, 1024 MiB by default), nothing changes.
2. When the context was left to the fit (``-c`` unset or 0), it starts at the model's training context (times the
   sequences when the KV cache is not unified); when the cards together (the host's RAM, on the CPU alone) are
   short of their margins, it is cut by linear interpolation between that and ``--fit-ctx`` (4096 by default) to
   what they hold, rounded down to a multiple of 256 x sequences, never longer than it was; one device that fits
   this way is done.
3. Layers are placed only when the user set neither ``-ngl``, ``-ts`` (on several cards) nor a tensor override
   (``-ot``, ``--n-cpu-moe``, ``--cpu-moe``); otherwise the fit stops (the context it cut stays cut).
4. Dense layers are filled back to front: the last card takes as many of the last layers (the output head counting
   as the last) as fit its target, then the card before it. For an MoE model these are "dense-only" layers: their
   routed experts stay in host memory.
5. MoE, when the dense weights of every layer leave a surplus: front to back, each card turns dense-only layers into
   full ones (experts on the card) while they fit, taking them from the first card that still holds dense-only
   layers, then tries to hold part of one more layer: its attention and up projections (UP), and if that fits all
   but the down projections (GATE); when UP does not fit, attention only (ATTN). The rest of that layer's FFN goes
   to the next card, or the CPU from the last.

llama.cpp searches the counts by false position; with allocations that grow with every layer added (as here) that
ends at the largest count that fits, which is what :func:`_largest` finds by bisection. Its memory is measured by
building the context without allocating; here by :func:`sim.llamacpp.allocations.allocations`, the rules the engine
loads with. The result is written as the flags llama.cpp sets: ``-ngl``, ``-ts`` (layer counts, several cards),
``-ot`` rules per partial layer and ``-c``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.config.llamacpp import FIT_CTX_MIN, FIT_TARGET_MIB, MAX_CTX, LlamaCpp
from sim.config.scenario import Scenario
from sim.core.units import GIB, MIB
from sim.llamacpp.allocations import allocations, placement_model
from sim.llamacpp.cmdline import ALL_LAYERS

CTX_ALIGN = 256  # the fitted context is a multiple of this (x sequences) (common/fit.cpp)

# what a partial layer moves to its overflow buffer (common/fit.cpp get_overflow_pattern): everything of the FFN
# (attention stays), all but the up projections, only the down projections, or (every further partial layer) the
# routed experts
_OVERFLOW = {"attn": r"blk\.{}\.ffn_(gate|up|gate_up|down).*", "up": r"blk\.{}\.ffn_(gate|gate_up|down).*",
             "gate": r"blk\.{}\.ffn_down.*", "moe": r"blk\.{}\.ffn_(up|down|gate_up|gate)_(ch|)exps"}
_ALL_EXPERTS = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU"


@dataclass
class _Layers:
    """One card's share: ``n_layer`` layers (the output head counts as one), the last ``n_part`` of them partial
    (their routed experts elsewhere); the first partial one moves ``overflow`` (a key of :data:`_OVERFLOW`)."""

    n_layer: int = 0
    n_part: int = 0
    overflow: str = "moe"

    @property
    def n_full(self) -> int:
        return self.n_layer - self.n_part


@dataclass(frozen=True)
class Fit:
    """What ``--fit`` did: the settings llama.cpp loads with, whether it succeeded (``failed``: why it stopped),
    and its steps, one line each (as its log's ``llama_params_fit`` lines say them)."""

    settings: LlamaCpp
    changed: tuple[str, ...]  # settings keys the fit set
    failed: str = ""
    steps: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        """One line: what the fit did, and where it stopped if it failed."""
        said = "; ".join(self.steps)
        return f"llama.cpp's --fit: {said}" + (f"; stopped: {self.failed}" if self.failed else "")


class _Measure:
    """Allocations of placements on one machine, each card's total (bytes) by settings."""

    def __init__(self, scn: Scenario, machine: str, base: LlamaCpp):
        self.scn, self.machine, self.base = scn, machine, base.model_copy(update={"sysmem_fallback": True})
        self.names: tuple[str, ...] = ()
        self.weights: list[float] = []

    def __call__(self, **update) -> tuple[list[float], list[float], float]:
        """(each card's allocations, each card's free memory, the CPU's allocations), bytes."""
        a = allocations(self.scn, self.machine, self.base.model_copy(update=update))
        self.names = a.names
        cards = a.memory[1:]
        self.weights = [m.weights for m in cards]  # of the last placement measured
        return [m.total for m in cards], [m.free or 0.0 for m in cards], a.memory[0].total


def fit_params(scn: Scenario, machine: str, settings: LlamaCpp, *, ctx_auto: bool, ngl_auto: bool,
               user_placement: bool, margin_mib: float = FIT_TARGET_MIB, ctx_min: int = FIT_CTX_MIN,
               unified_kv: bool = False) -> Fit:
    """llama.cpp's ``--fit`` on ``machine`` (module docstring). ``settings``: what the command line gave, ``-ngl``
    and ``-c`` as concrete values for the fit to change when ``ngl_auto`` / ``ctx_auto``; ``user_placement``: the
    line set ``-ts``, ``-ot``, ``--n-cpu-moe`` or ``--cpu-moe`` (the fit then leaves layers alone)."""
    m = scn.machines[machine]
    spec = scn.models[m.engine.model]
    geometry = placement_model(spec.file, spec.quant, spec.weights_gib).geometry
    blocks, moe = geometry.layers, geometry.is_moe
    streams = 1 if unified_kv else max(settings.parallel, 1)
    steps: list[str] = []
    s = settings
    if ctx_auto:
        train = geometry.train_context or FIT_CTX_MIN
        if not geometry.train_context:
            steps.append(f"the model file does not give its training context: {FIT_CTX_MIN:,} taken")
        s = s.model_copy(update={"ctx_size": train * streams})
        steps.append(f"-c 0: the model's training context, {train:,} tokens" + (
            f" x {streams} sequences (KV cache not unified)" if streams > 1 else ""))
    measure = _Measure(scn, machine, s)
    used, free, cpu_used = measure()
    margin = margin_mib * MIB
    nd = len(used)
    changed: list[str] = ["ctx_size"] if ctx_auto else []

    def done(failed: str = "") -> Fit:
        return Fit(s, tuple(changed), failed, tuple(steps))

    host = m.host
    ram = host.ram_gib * GIB if host is not None and host.ram_gib else None
    if nd == 0:  # the CPU alone: the host's memory is the one to keep the margin free of (fit.cpp: its total)
        if ram is None or ram - cpu_used >= margin:
            steps.append("no card: the host's memory is enough (or not known), no changes needed")
            return done()
        used, free = [cpu_used], [ram]
    elif all(f - u >= margin for u, f in zip(used, free, strict=True)):
        steps.append(f"every card keeps at least {margin_mib:g} MiB free: no changes needed")
        return done()
    # step 2: a shorter context, when the cards together (or the host) are short of their margins
    if sum(free) - sum(used) - max(nd, 1) * margin < 0:
        if ctx_auto:
            weights = sum(measure.weights) / max(min(s.n_gpu_layers, blocks), 1) if nd > 1 else 0.0
            s, fitted_one = _cut_context(measure, s, used, free, margin, ctx_min * streams, streams, weights, moe,
                                         steps, host_only=nd == 0)
            if fitted_one:
                return done()
            used, free, _ = measure(ctx_size=s.ctx_size)
        else:
            steps.append(f"context size set by the user to {s.ctx_size:,}: no change")
    if nd == 0:
        return done("was unable to fit model into system memory by reducing context")
    if not ngl_auto:
        return done(f"n_gpu_layers already set by user to {s.n_gpu_layers}")
    if user_placement:
        return done("tensor split or tensor overrides already set by user")
    measure = _Measure(scn, machine, s)
    measure()
    layout, overflow_to = _place_layers(measure, blocks, moe, [f - margin for f in free], steps)
    s = s.model_copy(update=_layout_flags(layout, blocks, overflow_to))
    changed += ["n_gpu_layers", "override_tensor"] + (["tensor_split"] if nd > 1 else [])
    return done()


def _cut_context(measure: _Measure, s: LlamaCpp, used: list[float], free: list[float], margin: float,
                 ctx_min_total: int, streams: int, weights_per_layer: float, moe: bool, steps: list[str],
                 host_only: bool = False) -> tuple[LlamaCpp, bool]:
    """Step 2: (the settings with the context cut, whether one device now fits). The cut interpolates linearly
    between the allocations at the training context and at ``ctx_min_total``; on several cards it keeps room for
    the half layer (dense) or sixth of one (MoE, a tensor) each card wastes (``weights_per_layer``: the cards'
    weights over their layers). ``host_only``: the CPU alone, its allocations against the host's RAM."""
    ctx_max = s.ctx_size
    if ctx_max <= ctx_min_total:
        steps.append(f"the context of {ctx_max:,} is kept whole" + (
            " (an explicit -c 0)" if ctx_min_total >= MAX_CTX else ", at most the smallest the fit cuts to"))
        return s, False
    nd = len(used)
    target = sum(free) - nd * margin
    if nd > 1:
        target -= (nd + 1) * weights_per_layer / (6 if moe else 2)
    low = measure(ctx_size=ctx_min_total)
    used_min = low[2] if host_only else sum(low[0])
    used_max = sum(used)
    if target > used_min and used_max > used_min:
        ctx = ctx_min_total + int((ctx_max - ctx_min_total) * (target - used_min) / (used_max - used_min))
        align = CTX_ALIGN * streams
        ctx = min(max(ctx - ctx % align, ctx_min_total), ctx_max)
        steps.append(f"context size reduced from {ctx_max:,} to {ctx:,}")
        s = s.model_copy(update={"ctx_size": ctx})
        if nd <= 1:
            steps.append("entire model can be fit by reducing context")
            return s, True
        return s, False
    steps.append(f"context size reduced from {ctx_max:,} to {ctx_min_total:,}, not enough" + (
        "" if host_only else ": layers move"))
    return s.model_copy(update={"ctx_size": ctx_min_total}), False


def _largest(low: int, high: int, fits) -> int:
    """The largest ``n`` in ``[low, high]`` with ``fits(n)``, ``fits(low)`` known true and ``fits`` monotone."""
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return high if high > low and fits(high) else low


def _place_layers(measure: _Measure, blocks: int, moe: bool, targets: list[float],
                  steps: list[str]) -> tuple[list[_Layers], list[str]]:
    """Steps 4 and 5: each card's layers, and the buffer each card's first partial layer overflows to."""
    nd = len(targets)
    per = [_Layers() for _ in range(nd)]
    overflow_to = ["CPU"] * nd

    def mem(layout: list[_Layers], to: list[str]) -> list[float]:
        return measure(**_layout_flags(layout, blocks, to))[0]

    for d in range(nd - 1, -1, -1):  # dense (MoE: dense-only) layers, back to front
        unassigned = blocks + 1 - sum(p.n_layer for p in per[d + 1:])

        def dense(n: int, d: int = d, base: list[_Layers] = per) -> list[_Layers]:
            layout = _copy(base)
            layout[d].n_layer = n
            if moe:
                layout[d].n_part = n - 1 if d == nd - 1 and n > 0 else n  # the output head is never partial
            return layout

        per = dense(_largest(per[d].n_layer, unassigned, lambda n, d=d: mem(dense(n), overflow_to)[d] <= targets[d]))
        steps.append(f"card {d}: {per[d].n_layer} layers" + (" (dense only: experts in host memory)" if moe else ""))
    if not moe:
        return per, overflow_to
    all_cpu = measure(n_gpu_layers=blocks + 1, override_tensor=[_ALL_EXPERTS], tensor_split=None)[0]
    surplus = sum(t - u for t, u in zip(targets, all_cpu, strict=True))
    if surplus <= 0:
        steps.append(f"with only dense weights on the cards there is still a deficit of {-surplus / MIB:,.0f} MiB")
        return per, overflow_to
    # the card the dense-only layers are taken from: the first of the trailing cards that hold layers; it only moves
    # on (fit.cpp's id_dense_start) as its partial layers run out
    start = next((j for j in range(nd) if all(p.n_layer > 0 for p in per[j:])), nd - 1)
    d = 0
    while d <= start < nd:  # full layers, front to back

        def converted(k: int, d: int = d, start: int = start, base: list[_Layers] = per) -> tuple[list[_Layers], int]:
            layout, left, j = _copy(base), k, start
            while j < nd:
                take = min(left, layout[j].n_part)
                layout[j].n_layer -= take
                layout[j].n_part -= take
                layout[d].n_layer += take
                left -= take
                if layout[j].n_part > 0:
                    break
                j += 1
            return layout, j

        room = sum(p.n_part for p in per[start:])
        k = _largest(0, room, lambda k, d=d, to=overflow_to: mem(converted(k)[0], to)[d] <= targets[d])
        per, start = converted(k)
        start = min(start, nd - 1)  # every dense-only layer converted: fit.cpp's id_dense_start_high
        if per[start].n_part > 0 and per[start].n_layer > (0 if d < nd - 1 else 1):
            per, overflow_to, start = _one_more(per, d, start, overflow_to, mem, targets, measure.names)
        p, partial = per[d], _partial_blocks(per, blocks, d)
        steps.append(f"card {d}: {p.n_layer} layers, {len(partial)} of its blocks with their experts elsewhere" + (
            f" (block {partial[0]} moving {p.overflow.upper()} of its FFN)" if partial and p.overflow != "moe"
            else ""))
        d += 1
    return per, overflow_to


def _partial_blocks(layout: list[_Layers], blocks: int, card: int) -> list[int]:
    """The blocks of ``card`` the layout leaves partial (llama.cpp counts the output head as the layer after the last
    block: a partial layer there names no tensor)."""
    first = blocks + 1 - sum(p.n_layer for p in layout)
    for p in layout[:card]:
        first += p.n_layer
    first += layout[card].n_full
    return [b for b in range(first, first + layout[card].n_part) if b < blocks]


def _copy(layout: list[_Layers]) -> list[_Layers]:
    return [_Layers(p.n_layer, p.n_part, p.overflow) for p in layout]


def _one_more(per: list[_Layers], d: int, start: int, overflow_to: list[str], mem, targets: list[float],
              names: tuple[str, ...]) -> tuple[list[_Layers], list[str], int]:
    """Part of one more layer on card ``d``, taken from card ``start``'s dense-only layers: attention and up
    projections (UP), and if that fits all but the down projections (GATE); when UP does not fit, attention alone
    (ATTN). Its FFN goes to the next card, or the CPU from the last. The layout, the overflow buffers and the card
    the next dense-only layer comes from."""
    nd = len(per)
    test = _copy(per)
    test[start].n_layer -= 1
    test[start].n_part -= 1
    test[d].n_layer += 1
    test[d].n_part += 1
    start_test = start + 1 if test[start].n_part == 0 else start
    to = list(overflow_to)
    if d < nd - 1:
        to[d] = names[d + 1]

    def fits(overflow: str) -> bool:
        test[d].overflow = overflow
        used = mem(test, to)
        return used[d] < targets[d] and (d + 1 == nd or used[d + 1] < targets[d + 1])

    if fits("up"):
        best = _copy(test)
        if fits("gate"):
            best = _copy(test)
        return best, to, start_test
    if fits("attn"):
        return test, to, start_test
    return per, overflow_to, start


def _layout_flags(layout: list[_Layers], blocks: int, overflow_to: list[str]) -> dict:
    """The settings (``-ngl``, ``-ts``, ``-ot``) llama.cpp sets for ``layout`` (common/fit.cpp
    set_ngl_tensor_split_tbo): the first partial layer of a card moves its overflow part to ``overflow_to``, every
    further one its routed experts to the CPU."""
    nd = len(layout)
    ngl = sum(p.n_layer for p in layout)
    rules, first = [], blocks + 1 - ngl
    for d, p in enumerate(layout):
        first += p.n_full
        for layer in range(first, first + p.n_part):
            kind, buffer = (p.overflow, overflow_to[d]) if layer == first else ("moe", "CPU")
            rules.append(_OVERFLOW[kind].format(layer) + "=" + buffer)
        first += p.n_part
    return {"n_gpu_layers": ngl, "override_tensor": rules,
            "tensor_split": [float(p.n_layer) for p in layout] if nd > 1 and ngl else None}


def resolve(scn: Scenario, machine: str, s: LlamaCpp) -> tuple[LlamaCpp, Fit | None]:
    """``s`` with nothing left to llama.cpp: with ``fit`` on, what :func:`fit_params` sets; without it, ``-ngl -1``
    as every layer and ``-c 0`` as the model's training context (all slots together). The fit, or None."""
    if not (s.fit or s.n_gpu_layers < 0 or s.ctx_size == 0):
        return s, None
    ngl = ALL_LAYERS if s.n_gpu_layers < 0 else s.n_gpu_layers
    if not s.fit:
        spec = scn.models[scn.machines[machine].engine.model]
        train = placement_model(spec.file, spec.quant, spec.weights_gib).geometry.train_context or FIT_CTX_MIN
        return s.model_copy(update={"n_gpu_layers": ngl, "ctx_size": s.ctx_size or train}), None
    cards = len(scn.machines[machine].gpus)
    user_placement = bool(s.override_tensor or s.n_cpu_moe or s.cpu_moe or (s.tensor_split and cards > 1))
    base = s.model_copy(update={"fit": False, "n_gpu_layers": ngl, "ctx_size": s.ctx_size or 1})
    fit = fit_params(scn, machine, base, ctx_auto=s.ctx_size == 0, ngl_auto=s.n_gpu_layers < 0,
                     user_placement=user_placement, margin_mib=s.fit_target_mib, ctx_min=s.fit_ctx,
                     unified_kv=s.kv_unified)
    return fit.settings, fit


def _digits(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"[{lo}-{hi}]"


def _block_regex(a: int, b: int) -> list[str]:
    """Alternatives matching a..b, both in one hundred."""
    hundred = a // 100
    head = str(hundred) if hundred else ""
    t0, t1 = a // 10 % 10, b // 10 % 10

    def tens(t: int) -> str:
        return head + str(t) if head or t else ""

    if t0 == t1:
        return [tens(t0) + _digits(a % 10, b % 10)]
    out = []
    if a % 10:
        out.append(tens(t0) + _digits(a % 10, 9))
        t0 += 1
    last = t1 if b % 10 == 9 else t1 - 1
    if not head and t0 == 0 and last >= 0:  # the one-digit numbers stand alone
        out.append("[0-9]")
        t0 = 1
    if t0 <= last:
        out.append(head + _digits(t0, last) + "[0-9]")
    if b % 10 != 9:
        out.append(tens(t1) + _digits(0, b % 10))
    return out


def layer_regex(layers: list[int]) -> str:
    """A regular expression matching exactly these block numbers, whole (``15..48`` is ``1[5-9]|[23][0-9]|4[0-8]``):
    each run of consecutive numbers by its decades."""
    ordered, runs = sorted(set(layers)), []
    for n in ordered:
        if runs and n == runs[-1][1] + 1 and n // 100 == runs[-1][0] // 100:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return "|".join(part for a, b in runs for part in _block_regex(a, b))


def merged_rules(rules: list[str]) -> list[str]:
    """-ot rules of one layer each (``blk\\.39\\.ffn_...=CPU``, as the fit writes them) with the layers that share a
    pattern and a buffer in one rule (``blk\\.(39|4[0-8])\\.ffn_...=CPU``), placing every tensor where the rules
    did: a rule that names no single layer, or a layer named twice, ends the run of rules merged across it (the
    first matching rule wins, so no rule moves ahead of one that could match the same tensor)."""
    import re

    out: list[str] = []
    groups: dict[tuple[str, str], list[int]] = {}
    seen: set[int] = set()

    def flush() -> None:
        for (rest, buffer), layers in groups.items():
            which = str(layers[0]) if len(layers) == 1 else "(" + layer_regex(layers) + ")"
            out.append(f"blk\\.{which}\\.{rest}={buffer}")
        groups.clear()
        seen.clear()

    for rule in rules:
        match = re.fullmatch(r"blk\\\.(\d+)\\\.(.*)=([^=]+)", rule)
        if match is None or int(match[1]) in seen:
            flush()
            if match is None:
                out.append(rule)
                continue
        seen.add(int(match[1]))
        groups.setdefault((match[2], match[3]), []).append(int(match[1]))
    flush()
    return out
