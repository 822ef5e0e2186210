"""Hostile or broken input costs little: each reproducer of the fuzz campaign (deep nesting, a list as a map key, a
YAML alias bomb, a device or a huge file as a scenario, a trace that never ends, a 10 MB key) is refused with exit 2
and one bounded ``sim: error:`` line naming the limit, in a few seconds and a few hundred MiB. Each test prints the
exit code, the wall time (s) and the peak resident memory (MiB) in its assertion message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bounded import ROOT, Outcome, run_bounded

SECONDS = 10.0  # wall time allowed a refusal (s; starting Python and sim takes about 1 s)
PEAK_MIB = 400.0  # peak resident memory allowed a refusal (MiB)
MAX_LINE = 1500  # characters of an error line, at most


def _refused(out: Outcome, *words: str) -> None:
    """``out`` is exit 2 with one short ``sim: error:`` line holding every one of ``words``, within the bounds."""
    out.assert_refused(*words, seconds=SECONDS, peak_mib=PEAK_MIB, max_line=MAX_LINE)


def _run(path: Path | str) -> Outcome:
    return run_bounded(["run", str(path)], timeout_s=60, memory_mib=3072)


def _scenario(tmp_path: Path, name: str = "gen3_5090.yaml", **replace: str) -> str:
    """A shipped scenario's text, its calibration files (and operator tables) named by absolute path, with
    ``replace`` applied."""
    text = Path(ROOT, "scenarios", name).read_text(encoding="utf-8")
    text = text.replace("calibrations: [../", f"calibrations: [{ROOT}/")
    text = text.replace("operators: ../calibration/", f"operators: {ROOT}/calibration/")  # a profiled-operator table
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new, 1)
    return text


@pytest.mark.parametrize("text", [
    "a: " + "[" * 500 + "]" * 500 + "\n",
    "a: " + "[" * 1100 + "]" * 1100 + "\n",
    "a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n",
    "".join("  " * i + "k:\n" for i in range(600)) + "  " * 600 + "x: 1\n",
    "".join("  " * i + "-\n" for i in range(600)) + "  " * 600 + "- 1\n",
    "a: &a " + "[" * 40 + "]" * 40 + "\nb: &b " + "[*a, " * 40 + "]" * 40 + "\n",  # deep only through an alias
], ids=["flow500", "flow1100", "flowmap3000", "block600", "blockseq600", "alias"])
def test_deep_nesting(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    _refused(_run(path), "nesting deeper than 64 levels")


@pytest.mark.parametrize("text,kind", [("{[1]: 2}\n", "list"), ("{[[1]]: 2}\n", "list"),
                                       ("a: 1\n? {x: 1}\n: 2\n", "map")])
def test_collection_as_map_key(tmp_path: Path, text: str, kind: str) -> None:
    path = tmp_path / "key.yaml"
    path.write_text(text)
    _refused(_run(path), "a map key must be a scalar", f"not a {kind}", "line ", "column ")


def test_alias_bomb(tmp_path: Path) -> None:
    levels = "abcdefghi"
    text = "a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n"
                                                  for p, c in zip(levels, levels[1:], strict=False))
    text += "name: *i\n"  # a bad value: its message names (part of) it
    path = tmp_path / "laughs.yaml"
    path.write_text(text)
    assert len(text.encode()) < 400
    _refused(_run(path), "more than 1,000,000 values")


def test_short_never_formats_a_huge_value() -> None:
    from sim.config.messages import short

    bomb: list = [1] * 9
    for _ in range(9):
        bomb = [bomb] * 9  # 9**10 values, shared
    assert short(bomb).startswith("[[[[[[[[[[1, 1, 1") and len(short(bomb)) == 60
    for value in (1, "a'b", [1, (2,), {"k": None}], (), set(), {1}, "x" * 100, list(range(100)), {"a" * 70: 1}):
        whole = repr(value)
        assert short(value) == (whole if len(whole) <= 60 else whole[:57] + "...")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_device_as_scenario(device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    _refused(_run(device), "not a regular file")


def test_fifo_as_scenario(tmp_path: Path) -> None:
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)  # nobody writes it: opening it would wait forever
    _refused(_run(fifo), "not a regular file")


def test_huge_scenario(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with open(path, "w") as fh:
        fh.write("name: x\n")
        fh.truncate(17 * 2**20)  # 17 MiB (sparse: the rest reads as NUL characters)
    _refused(_run(path), "larger than 16 MiB")


@pytest.mark.parametrize("where", ["/dev/zero", "fifo", "rows", "big"])
@pytest.mark.parametrize("key", ["trace", "lengths"])
def test_endless_trace(tmp_path: Path, where: str, key: str) -> None:
    csv = tmp_path / "trace.csv"
    if where == "/dev/zero":
        csv = Path(where)
    elif where == "fifo":
        os.mkfifo(csv)
    elif where == "rows":
        csv.write_text("prompt_tokens,output_tokens\n" + "1,1\n" * (10**7 + 1))
    else:
        with open(csv, "w") as fh:
            fh.write("prompt_tokens,output_tokens\n")
            fh.truncate(257 * 2**20)
    if key == "trace":
        text = _scenario(tmp_path, "azure_conv_5090.yaml", **{"trace: traces/azure2023_conv.csv": f"trace: {csv}"})
    else:
        text = _scenario(tmp_path, "a100_llama2_7b.yaml",
                         **{"lengths: traces/arxiv_summarization_lengths.csv": f"lengths: {csv}"})
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(text)
    words = {"/dev/zero": "not a regular file", "fifo": "not a regular file", "rows": "more than 10,000,000 rows",
             "big": "larger than 256 MiB"}[where]
    _refused(_run(scenario), f"serve.workload.{key}", words)


@pytest.mark.parametrize("where", ["top", "gpus"])
def test_huge_key(tmp_path: Path, where: str) -> None:
    key = "k" * 10_000_000
    extra = f"? {key}\n: 1\n" if where == "top" else f"  ? {key}\n  : {{vram_gib: 1}}\n"
    text = _scenario(tmp_path, **({"gpus:\n": "gpus:\n" + extra} if where == "gpus" else {}))
    if where == "top":
        text += extra
    path = tmp_path / "key.yaml"
    path.write_text(text)
    _refused(_run(path), "kkkkk...kkkkk")


def test_error_parts_are_cut() -> None:
    from sim.core.errors import ScenarioError, ScenarioErrors

    err = ScenarioError("f" * 10**6, "k" * 10**7, "p" * 10**7)
    assert len(str(err)) < 1500 and "..." in err.path and len(err.path) == 200
    assert ScenarioError("a.yaml", "x.y", "bad").lines() == ["a.yaml: x.y: bad"]
    many = ScenarioErrors([ScenarioError("a", "k" * 10**6, "bad")] * 30)
    assert all(len(line) < 1500 for line in str(many).splitlines())
