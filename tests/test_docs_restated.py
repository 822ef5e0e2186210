"""Prose that restates a figure the same page's checked output prints: the sentence and the output lines it comes
from must both stay in the page. tests/test_docs_commands.py runs the page's console block (a slow block is run by
benchmarks/docs_commands.py) and checks those lines; this keeps the sentence beside them true: when the output moves,
its block fails; when the block is updated, this fails until the sentence follows. A figure a page takes from another
producer (a benchmark, a shipped calibration file, the fidelity report, a run) is checked in
tests/test_docs_figures.py."""

from __future__ import annotations

import pytest
from test_docs_figures import page, says

# (page, the sentence, the output lines of the page it comes from)
RESTATED = [
    ("docs/hardware.md", "the median request finds 77.0% of its lookups in VRAM with 52.8% of the experts cached",
     ["(8.64 GiB, coverage 52.8%)", "hit rate 77.0% and PCIe spill"]),
    ("docs/hardware.md", "147 against 153 tok/s), but VRAM decides more: the 24 GiB cards keep 95% of lookups in VRAM",
     ["| RTX 3090 | 13,463 (-31.0%) | 95.03 (-3.186 pts) | 147.3", "| RTX 4090 | 13,463 (-31.0%) | 95.03 (-3.186 pts) "
      "| 152.8"]),
    ("docs/hardware.md", "the 16 GB RTX 4080 keeps 89%", ["| RTX 4080 | 7,247 (-62.9%) | 88.94"]),
    ("docs/hardware.md", "gives half the 5090's energy per token", ["| 270.5 (-46.0%) | 0.9979 (-50.5%) |"]),
    ("docs/serving.md", "without the cache throughput falls from 765 to 414 tok/s (-46%), TTFT p50 rises from 0.12 to "
     "0.73 s, TPOT p50 from 31 to 80 ms; 78% of prompt tokens were found cached",
     ["765.3      414.2  -351.0 (-45.9%)", "0.1214     0.7256", "0.0312    0.07980", "78.38          0"]),
    ("docs/serving.md", "TPOT p50 23.9 ms against 87.3 ms on one card", ["0.08732   0.02391"]),
    ("docs/multi_gpu.md", "14,870 resident experts (24.05 GiB, with 6.75 GiB of engine overhead and 1.04 GiB left "
     "free", ["expert cache 14,870 of 24,576 slots (24.05 GiB,", "+ engine overhead 6.75 +",
              "gpu0 30.80 used, 1.04 free"]),
    ("docs/multi_gpu.md", "6,615 copies on the 5080 (10.7 GiB) and 3,091 on the 5060 Ti (5.0 GiB)",
     ["peer gpu1 6,615 experts, peer gpu2 3,091 experts"]),
    ("docs/multi_gpu.md", "the Strata fit's efficiency (23 us)", ["23.1 us per missed expert on the CPU"]),
    ("docs/multi_gpu.md", "falls from 371 to 340 tok/s (8%; 42% of the requests then read over PCIe)",
     ["decode 371.2 tok/s", "decode 340.3 tok/s", "requests that ever read over PCIe: 42%"]),
    ("docs/multi_gpu.md", "makes 6.36 ms a step", ["dense 6.36 ms per step"]),
    ("docs/multi_gpu.md", "yet decode falls from 312 to 217 tok/s: every layer waits for the slowest card and a round "
     "trip; on x16 links it is still 222", ["| baseline | 311.5 |", "| layer split | 216.7 (-30.4%) |",
                                            "| layer split, x16 links | 221.9 (-28.8%) |"]),
    ("docs/calibration.md", "gives round-1 decode 130.5 tok/s (90% interval 47.5-146.2) against 133.7 at the fitted "
     "values, and hit rate 86.9% (84.7-88.4%)", ["86.91  84.71 to 88.38", "130.5  47.51 to 146.2",
                                                  "decode 133.7 tok/s (token-weighted"]),
    ("docs/calibration.md", "gives `step.layer_s` 54 us (relative standard error 27%: 2.6 ms of fixed time per step "
     "over the 48 layers", ["step.layer_s = 5.44099e-05 (relative standard error 27.4%)"]),
    ("docs/calibration.md", "`prefill.token_s` 1.14e-4 s (15%) and `prefill.stream_gbps` 27.6 GB/s (28%",
     ["prefill.token_s = 0.000114299 (relative standard error 15.1%)",
      "prefill.stream_gbps = 27.6233 (relative standard error 28.2%)"]),
    ("docs/calibration.md", "(`prefill.kv_spill_token_s`, 297%) or the per-request skew spread (477%)",
     ["(relative standard error 296.8%)", "(relative standard error 477.1%)"]),
    ("docs/calibration.md", "(459 simulations;", ["60 observations, 459 simulations;"]),
    ("docs/calibration.md", "gives a break-even of 19,723 tokens with a 90% interval from 7,298 tokens to never (in "
     "16% of the draws the RTX 4090 decodes faster", ["break-even: 19,723 tokens (90% interval 7,298 to never); never "
                                                      "in 16% of draws", "rtx4090_box in 16% of draws"]),
    ("docs/calibration.md", "against 20,389 at the table's rates: the break-even divides by a difference of "
     "reciprocals of two rates 13% apart", ["no tie rule)         20,389", "decodes 146 tok/s", "decodes 129 tok/s"]),
]


@pytest.mark.parametrize("name, sentence, evidence", RESTATED, ids=[f"{r[0]}:{r[1][:24]}" for r in RESTATED])
def test_prose_restates_the_pages_checked_output(name, sentence, evidence):
    says(name, sentence)
    for line in evidence:
        assert line in page(name), f"{name}: its output no longer holds {line!r}: does {sentence!r} still hold?"
