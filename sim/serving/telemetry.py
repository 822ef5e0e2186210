"""Per-request telemetry: one schema, one name per quantity.

Every served request has the quantities below, whatever engine served it. The columns a run keeps
(:class:`sim.serving.served.ServedRequests`), the record of one request, the sums an engine accumulates over a
request's steps, the requests table (``requests.csv``, the DataFrame of the Python API) and its header are all made
from this list; a quantity has the same name in each of them.

- ``STORED``: what a run keeps per request (the queue's timeline, the request's lengths, the engine's sums);
- ``STEP_SUMS``: of those, what an engine adds up over a request's decode steps (seconds by what the GPU did, expert
  lookups and distinct experts by tier); an engine without expert tiers leaves the counts at zero;
- ``DERIVED``: what is computed from the stored columns (rates and shares), undefined (empty) where its denominator
  is zero or the request was not served;
- ``TABLE``: the requests table's columns, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["int", "float", "str"]


@dataclass(frozen=True)
class Quantity:
    """One per-request quantity: its name (everywhere), type, unit and meaning."""

    name: str
    kind: Kind
    unit: str
    doc: str


def _q(name: str, kind: Kind, unit: str, doc: str) -> Quantity:
    return Quantity(name, kind, unit, doc)


TIMELINE = (
    _q("request", "int", "", "position in sending order"),
    _q("client", "int", "", "closed loop and agent sessions: the client that sent it; -1: open loop"),
    _q("end", "str", "", "stop, length (reached max_tokens), cancelled (timed out in the queue) or rejected"),
    _q("sent_s", "float", "s", "the client sent it"),
    _q("arrival_s", "float", "s", "it reached the engine (sent + request_overhead_s)"),
    _q("queue_wait_s", "float", "s", "from reaching the engine to getting its place (cancelled: the timeout)"),
    _q("start_s", "float", "s", "it got its place (a decode slot, a batch, KV)"),
    _q("ttft_s", "float", "s", "from sending to the first generated token"),
    _q("end_s", "float", "s", "it ended"),
)
LENGTHS = (
    _q("prompt_tokens", "int", "tokens", "prompt, cached tokens included"),
    _q("cached_tokens", "int", "tokens", "of those, already in the engine's prompt cache"),
    _q("output_tokens", "int", "tokens", "generated (capped at max_tokens)"),
    _q("prefill_s", "float", "s", "GPU seconds of its prefill"),
    _q("decode_gpu_s", "float", "s", "GPU seconds of its decode (decode_s when it had the GPU alone)"),
)
STEP_SUMS = (
    _q("decode_s", "float", "s", "its decode: GPU seconds alone on the GPU, wall seconds when it shared it; the "
       "steps after its prefill (an engine whose first token comes with the prefill: from that token on)"),
    _q("compute_s", "float", "s", "GPU computing"),
    _q("stall_s", "float", "s", "GPU waiting for expert reads over PCIe or for peer GPUs"),
    _q("eager_s", "float", "s", "eager-step overhead, off the fused GPU path"),
    _q("host_s", "float", "s", "host work with the GPU idle"),
    _q("lookups", "int", "lookups", "routed expert lookups, every position of every step"),
    _q("vram_hits", "int", "lookups", "lookups served from the VRAM expert cache"),
    _q("peer_lookups", "int", "lookups", "lookups served by a peer GPU"),
    _q("disk_lookups", "int", "lookups", "lookups served from beyond host RAM"),
    _q("routed", "int", "experts", "distinct experts its steps touched (each once per step)"),
    _q("cpu_experts", "int", "experts", "distinct experts the host CPU computed"),
    _q("peer_experts", "int", "experts", "distinct experts peer GPUs computed"),
    _q("pcie_reads", "int", "experts", "distinct experts read over PCIe (host RAM beyond the CPU window, disk)"),
    _q("disk_reads", "int", "experts", "distinct experts read from disk"),
)
STORED = TIMELINE + LENGTHS + STEP_SUMS

DERIVED = (
    _q("e2e_s", "float", "s", "end_s - sent_s"),
    _q("hit_rate", "float", "fraction", "vram_hits / lookups (served, with lookups)"),
    _q("pcie_share", "float", "fraction", "pcie_reads / routed (served, with lookups)"),
    _q("decode_tok_s", "float", "tok/s", "output_tokens / decode_s (served)"),
)

TABLE = ("request", "client", "end", "sent_s", "arrival_s", "queue_wait_s", "end_s", "e2e_s", "prompt_tokens",
         "cached_tokens", "prefill_s", "output_tokens", "hit_rate", "pcie_share", "decode_tok_s", "ttft_s", "start_s",
         "decode_s", "decode_gpu_s", "compute_s", "stall_s", "eager_s", "host_s", "lookups", "vram_hits",
         "peer_lookups", "disk_lookups", "routed", "cpu_experts", "peer_experts", "pcie_reads", "disk_reads")

QUANTITIES = {q.name: q for q in STORED + DERIVED}
STORED_NAMES = tuple(q.name for q in STORED)
SUM_NAMES = tuple(q.name for q in STEP_SUMS)
LOOKUP_COUNTS = tuple(q.name for q in STEP_SUMS if q.unit == "lookups")
SERVED_ENDS = ("stop", "length")
