"""What a pasted ``llama-batched-bench`` command line (llama.cpp's ``tools/batched-bench``) holds beyond a server
line's flags: :func:`sim.llamacpp.cmdline.parse_command` reads it with these flags and :func:`batched_sizes`.

Spellings follow llama.cpp's ``common/arg.cpp`` (the options of ``LLAMA_EXAMPLE_BENCH``): every option the server and
cli share (``-m``, ``-c`` = n_kv_max, ``-b``, ``-ub``, ``-ngl``, ``-fa``, ``-ctk``, ``-ot``, ...) and its own:

* ``-npp``, ``-ntg``, ``-npl``: comma lists of prompt tokens, generated tokens and parallel sequences (``B``); a
  repeated flag appends its values, as llama.cpp's ``string_split`` into ``params.n_pp`` does. They have no long
  spelling and take no ranges. Absent, a list is empty and the tool runs no test (the lists' defaults are empty).
* ``-pps``: the prompt is processed once and shared by the sequences; ``-tgs``: the sequences generate one after
  another instead of together. Both are bare flags, off by default.
* ``-kvu`` / ``--kv-unified``, ``-no-kvu`` / ``--no-kv-unified``: one KV buffer for all sequences (settings key
  ``kv_unified``).
* ``--output-format md|jsonl`` changes only how rows are printed (``ignored``).

The tests go to ``bench``: ``n_pp``, ``n_tg``, ``n_pl`` (lists of ints, in the order given; llama-batched-bench
runs ``for pp, for tg, for pl``), ``is_pp_shared``, ``is_tg_separate`` (booleans).
"""

from __future__ import annotations

from typing import Any

from sim.core.errors import ScenarioError

LISTS = {"n_pp": "-npp", "n_tg": "-ntg", "n_pl": "-npl"}  # bench key -> flag
SWITCHES = ("is_pp_shared", "is_tg_separate")
# its flags beyond the server's, as sim.llamacpp.cmdline's tables are written (key kind flag...): counts, a comma list
# of integers >= 0 added to the flag's values; on / off, a bare flag setting True / False
FLAG_ROWS = """
n_pp counts -npp; n_tg counts -ntg; n_pl counts -npl; is_pp_shared on -pps; is_tg_separate on -tgs
kv_unified on -kvu --kv-unified; kv_unified off -no-kvu --no-kv-unified
"""


def batched_sizes(bench: dict[str, Any], settings: dict[str, Any], values: dict[str, list], max_tests: int) -> None:
    """Fill ``bench`` with the test lists (``values``: each list flag's values, in the order given) and the switches
    (moved out of ``settings``). A ``-npl`` below 1, or more than ``max_tests`` (pp, tg, pl) tests, raises
    :class:`ScenarioError` naming the flag."""
    for key in LISTS:
        bench[key] = list(values.get(key, []))
    for key in SWITCHES:
        bench[key] = bool(settings.pop(key, False))
    low = [n for n in bench["n_pl"] if n < 1]
    if low:
        raise ScenarioError("command line", "-npl", f"expected parallel sequences >= 1, got {low[0]}")
    tests = len(bench["n_pp"]) * len(bench["n_tg"]) * len(bench["n_pl"])
    if tests > max_tests:
        raise ScenarioError("command line", "-npl", f"expected at most {max_tests} tests (-npp x -ntg x -npl values), "
                            f"got {tests}")


def batched_tests(bench: dict) -> list[tuple[int, int, int]]:
    """The (pp, tg, pl) of every test, in llama-batched-bench's order, before it skips those over ``-c``."""
    return [(pp, tg, pl) for pp in bench.get("n_pp", []) for tg in bench.get("n_tg", [])
            for pl in bench.get("n_pl", [])]
