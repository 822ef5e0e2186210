"""What any engine's run says as a server under load, from its requests and timeline: throughput, TTFT, queueing,
admission, Little's law, VRAM per GPU; and its requests bucketed by a per-request figure."""

from __future__ import annotations

import numpy as np

from sim.serving.queue import Timeline
from sim.serving.served import ServedRequests, as_served

VramRows = tuple[tuple[str, float, float], ...]  # per GPU: (name, used MiB, total MiB)


def fsum(values: np.ndarray) -> float:
    """Sum in order, one float at a time (the totals a loop over the requests would give, to the last bit)."""
    return float(sum(values.tolist()))


def share(part: float, whole: float) -> float:
    """``part / whole`` as a share of a resource (fraction, 0 to 1), NaN when ``whole`` is not positive.

    The part and the whole are sums of the same times taken in different orders (a busy time added step by step
    against a makespan or a total kept per request), so they can differ in the last bit: a share of
    1.0000000000000002 is float rounding, not more than all of the time, and is clamped to 1 (and to 0 below)."""
    if not whole > 0:
        return float("nan")
    return min(max(part / whole, 0.0), 1.0)


def load_metrics(recs, tl: Timeline, vram: VramRows) -> dict[str, float]:
    """Throughput, TTFT, queueing and admission over the whole run; running and queued requests (time averages and
    peaks, requests); VRAM per GPU. Little's law check: the time-averaged number of requests in the engine (integrated
    over the run) against arrival rate x mean time in it."""
    reqs = as_served(recs)
    c = reqs.columns
    served = reqs.served
    end = c["end"]
    admitted = end != "rejected"
    ttft = c["ttft_s"][served]
    wait = c["queue_wait_s"][admitted]
    span = tl.makespan_s
    n_served = int(served.sum())
    tokens = int(c["output_tokens"][served].sum())
    new_tokens = int((c["prompt_tokens"] - c["cached_tokens"])[served].sum())
    prefill = fsum(c["prefill_s"][served])
    out: dict[str, float] = {
        "requests_completed": float(n_served),
        "requests_rejected": float((~admitted).sum()),
        "requests_cancelled": float((end == "cancelled").sum()),
        "requests_length": float((end == "length").sum()),
        "throughput_tok_s": tokens / span if span > 0 else float("nan"),
        "requests_per_s": n_served / span if span > 0 else float("nan"),
        "makespan_s": span,
        "queue_wait_mean_s": float(wait.mean()) if wait.size else 0.0,
        "queue_peak": float(tl.peak_queue),
        "gpu_active_share": share(tl.busy_s, span),
        "slots_active_mean": tl.active_area / span if span > 0 else float("nan"),
        # requests holding a place (a decode slot, or a running sequence of a batch) and requests waiting for one:
        # time averages over the run and the most at once
        "running_mean": tl.active_area / span if span > 0 else 0.0,
        "running_peak": float(tl.peak_active),
        "queued_mean": max(tl.in_system_area - tl.active_area, 0.0) / span if span > 0 else 0.0,
        "queued_peak": float(max(tl.peak_queue, tl.peak_waiting)),
        "prefill_tok_s": new_tokens / prefill if prefill > 0 else float("nan"),
    }
    if ttft.size:
        out |= {"ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_mean_s": float(ttft.mean()),
                "ttft_p99_s": float(np.percentile(ttft, 99)),
                "e2e_mean_s": float(np.mean((c["end_s"] - c["sent_s"])[served]))}
    if span > 0 and admitted.any():  # Little's law: L (integrated) = lambda x W (per request)
        out["requests_in_engine_mean"] = tl.in_system_area / span
        out["little_lambda_w"] = int(admitted.sum()) / span * float(np.mean((c["end_s"] - c["arrival_s"])[admitted]))
    for name, used, total in vram:
        out[f"vram.{name}.used_mib"] = used
        out[f"vram.{name}.free_mib"] = total - used
    return out


BUCKETS = (("pcie_spill", 0, 0), ("pcie_spill", 0, 0.5), ("pcie_spill", 0.5, 3), ("pcie_spill", 3, 5),
           ("pcie_spill", 5, None), ("hit_rate", 0, 90), ("hit_rate", 90, 95), ("hit_rate", 95, 99),
           ("hit_rate", 99, None))


def in_bucket(pct: np.ndarray, lo: float, hi: float | None) -> np.ndarray:
    """Requests whose share (percent) falls in [lo, hi); ``lo == hi == 0``: exactly 0; ``lo == 0``: (0, hi) for
    spill (above zero) as the source's buckets are cut."""
    if lo == 0 and hi == 0:
        return pct == 0
    upper = pct < hi if hi is not None else np.ones(pct.shape, dtype=bool)
    return upper & ((pct > 0) if lo == 0 else (pct >= lo))


def bucket_arrays(recs) -> dict[str, np.ndarray]:
    """Per served request: spill share and hit rate (percent) and decode tok/s, for :func:`bucket_requests`."""
    reqs = as_served(recs)
    r = reqs.subset(reqs.served)
    return {"pcie_spill": r.pcie_share * 100, "hit_rate": r.hit_rate * 100, "decode_tok_s": r.decode_tok_s}


def bucket_requests(arrays: dict[str, np.ndarray], by: str, lo: float, hi: float | None) -> tuple[int, float | None]:
    """(count, mean per-request decode tok/s) of the requests in one bucket: ``by`` is ``pcie_spill`` (cut as
    :func:`in_bucket`) or ``hit_rate`` ([lo, hi) percent)."""
    pct = arrays[by]
    mask = in_bucket(pct, lo, hi) if by == "pcie_spill" else (pct >= lo) & (pct < (hi if hi is not None else np.inf))
    return int(mask.sum()), (float(arrays["decode_tok_s"][mask].mean()) if mask.any() else None)


SPILL_BUCKETS = ("bucket_by", "low_pct", "high_pct", "requests", "decode_tok_s")  # spill_buckets.csv


def spill_buckets(requests: ServedRequests) -> list[dict]:
    """Served requests bucketed by PCIe spill share and by hit rate (percent), as ``strata_spill_buckets.csv`` is:
    count and mean per-request decode tok/s of each bucket."""
    arrays = bucket_arrays(requests)
    rows = []
    for by, lo, hi in BUCKETS:
        n, rate = bucket_requests(arrays, by, lo, hi)
        rows.append({"bucket_by": by, "low_pct": lo, "high_pct": hi, "requests": n, "decode_tok_s": rate})
    return rows
