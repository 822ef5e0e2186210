"""The cost ledger: a term is the largest of its sums of amount / rate, fixed costs add, compiled ledgers give the
same seconds as each ledger alone; and the mixers' cache and attention physics by layer kind."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.llamacpp.layers import KV_PAD, Mixer
from sim.llamacpp.ledger import CompiledLedgers, Ledger


def _ledger(a: float, b: float, c: float, n: float) -> Ledger:
    lg = Ledger()
    lg.term("gpu", [(a, ("eff", 10.0))], [(b, (None, 5.0))])
    lg.term("cpu", [(c, ("eff", 2.0))], weight=3.0)
    lg.count("node_s", n)
    return lg


def test_a_term_is_its_longest_bound_and_fixed_costs_add():
    lg = _ledger(20.0, 15.0, 4.0, 7.0)
    values = {"eff": 0.5, "node_s": 0.01}
    # gpu: max(20 / (0.5 x 10), 15 / 5) = 4; cpu: 3 x 4 / (0.5 x 2) = 12; fixed 0.07
    assert math.isclose(lg.seconds(values), 4.0 + 12.0 + 0.07)
    parts = lg.seconds_by_category(values)
    assert math.isclose(parts["gpu"], 4.0) and math.isclose(parts["cpu"], 12.0) and math.isclose(parts["fixed"], 0.07)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(*(st.floats(0.0, 1e3) for _ in range(4))), min_size=1, max_size=6),
       st.floats(0.05, 1.0), st.floats(0.0, 1e-2))
def test_compiled_ledgers_equal_each_ledger(specs, eff, node):
    ledgers = [_ledger(*s) for s in specs]
    comp = CompiledLedgers.of(ledgers)
    values = {"eff": eff, "node_s": node}
    got = comp.seconds(np.array([values[n] for n in comp.names]))
    want = [lg.seconds(values) for lg in ledgers]
    assert np.allclose(got, want, rtol=1e-12, atol=1e-15)


def test_extend_scales_work_and_fixed_costs():
    one = _ledger(20.0, 15.0, 4.0, 7.0)
    two = Ledger()
    two.extend(one, 2.5)
    values = {"eff": 0.5, "node_s": 0.01}
    assert math.isclose(two.seconds(values), 2.5 * one.seconds(values))


GQA = Mixer("full", heads=32, kv_heads=8, key_dim=128, value_dim=128, cache_k=8 * 128, cache_v=8 * 128)


def test_gqa_decode_reads_the_cache_once_per_kv_head_with_flash_attention_and_per_query_head_without():
    reads_fa, flops, scores_fa = GQA.decode(4096, 1, True, 2.0, 2.0)
    reads_plain, _, scores = GQA.decode(4096, 1, False, 2.0, 2.0)
    assert reads_fa == 4096 * 2 * 8 * 128 * 2.0
    assert reads_plain == reads_fa * 4  # 32 query heads over 8 KV heads
    assert scores_fa == 0 and scores > 0
    assert flops == 2 * 32 * 256 * 4096


def test_cache_types_scale_the_cell_and_cells_are_padded():
    assert GQA.cell_bytes(34 / 32, 34 / 32) == GQA.cell_bytes(2.0, 2.0) * 17 / 32
    assert GQA.cells(1000, 512) == 1024 and GQA.cells(4096, 512) == 4096
    assert GQA.cells(1, 1) == KV_PAD


def test_a_sliding_window_caps_reads_and_cells_a_linear_layer_ignores_depth():
    swa = Mixer("sliding", 64, 8, 64, 64, 512, 512, window=128)
    assert swa.decode(100_000, 1, True, 2, 2) == swa.decode(128, 1, True, 2, 2)
    assert swa.cells(131072, 512) == 768  # 128 x 1 sequence + 512, padded to 256
    gdn = Mixer("linear", 16, 0, 0, 0, 0, 0, state_bytes=1e6, state_elements=2.5e5)
    assert gdn.decode(10, 1, True, 2, 2) == gdn.decode(100_000, 1, True, 2, 2)
    assert gdn.cells(100_000, 512) == 0


def test_prompt_attention_grows_with_depth_and_ubatch():
    _, shallow, _ = GQA.prompt(512, 0, True, 2, 2)
    _, deep, _ = GQA.prompt(512, 16384, True, 2, 2)
    assert deep > 30 * shallow


def test_the_gradient_is_the_derivative_by_the_log_of_each_value():
    ledgers = [_ledger(20.0, 15.0, 4.0, 7.0), _ledger(2.0, 30.0, 1.0, 0.0)]
    comp = CompiledLedgers.of(ledgers)
    v = np.array([{"eff": 0.5, "node_s": 0.01}[n] for n in comp.names])
    seconds, grad = comp.seconds_and_gradient(v)
    assert np.allclose(seconds, comp.seconds(v))
    for j in range(len(v)):
        step = v.copy()
        step[j] *= math.exp(1e-6)
        numeric = (comp.seconds(step) - seconds) / 1e-6
        assert np.allclose(grad[:, j], numeric, rtol=1e-4, atol=1e-9)


def test_compacting_merges_repeated_terms_and_keeps_the_seconds():
    lg = Ledger()
    for _ in range(48):
        lg.term("gpu:attention", [(5.0, ("eff", 10.0))], [(3.0, (None, 1.0))])
        lg.term("gpu:experts", [(7.0, ("eff", 10.0))])
    lg.count("node_s", 10)
    small = lg.compact()
    values = {"eff": 0.5, "node_s": 0.01}
    assert len(small.term_weight) == 2
    assert math.isclose(small.seconds(values), lg.seconds(values))
    assert small.seconds_by_category(values).keys() == lg.seconds_by_category(values).keys()


def test_a_rate_divided_by_a_parameter_costs_in_proportion_to_it():
    lg = Ledger()
    lg.term("gpu", [(10.0, ("eff", 4.0)), (6.0, ("eff", 4.0, "half"))])
    values = {"eff": 0.5, "half": 16.0}
    assert math.isclose(lg.seconds(values), 10 / 2 + 6 * 16 / 2)
    comp = CompiledLedgers.of([lg])
    v = np.array([values[n] for n in comp.names])
    seconds, grad = comp.seconds_and_gradient(v)
    assert math.isclose(seconds[0], lg.seconds(values))
    for j in range(len(v)):
        step = v.copy()
        step[j] *= math.exp(1e-6)
        assert math.isclose(grad[0, j], (comp.seconds(step)[0] - seconds[0]) / 1e-6, rel_tol=1e-4)
