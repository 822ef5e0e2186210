"""Read a pasted llama.cpp command line into the settings that decide speed and memory; write settings as flags.

Programs: ``llama-server``, ``llama-cli`` (old: ``server``, ``main``), ``llama-bench``, ik_llama.cpp's
``llama-sweep-bench``, ``llama-batched-bench`` (its flags: :mod:`sim.llamacpp.cmdline_batched`); behind a path,
environment assignments (``env``), a prompt or a wrapper (``unknown``); a line continued with ``\\``, POSIX quoting, a
``#`` comment, a pipe or redirection (``ignored``), ``--ctx-size=8192``.

Spellings follow llama.cpp's ``common/arg.cpp`` (server, cli), ``tools/llama-bench/llama-bench.cpp`` and
ik_llama.cpp's ``common/common.cpp`` (sweep-bench). A flag given twice keeps its last value, except ``-ot``, whose
rules add up: llama.cpp appends every ``-ot``, ``--n-cpu-moe`` and ``--cpu-moe`` rule to one list in command-line
order and gives a tensor the buffer of the first rule whose regex is *found* in its name (``std::regex_search``,
not a full match). llama-bench differs: a test parameter takes a comma list or a range (``first-last``,
``first-last+step``, ``first-last*mult``), a repeated flag adds values, and a key given several values goes to
``sweeps``; its ``-ot`` separates override groups (sweep values) by ``,`` and rules in a group by ``;``, its ``-ts``
and ``-dev`` separate devices by ``/``, its booleans are ``0|1`` (``-nkvo 1``, ``-mmp 0``).

Settings keys (the tables ``_COMMON`` and ``_BENCH`` give their flags): ``n_gpu_layers`` (``all`` reads as
:data:`ALL_LAYERS`, ``auto`` as -1, llama.cpp's auto; numbers as given), ``n_cpu_moe`` (mainline keeps the experts
of layers 0..N-1 on the CPU), ``cpu_moe``, ``override_tensor`` (list of ``regex=BUFFER``); ints ``ctx_size``,
``batch_size``, ``ubatch_size``, ``threads``, ``threads_batch``, ``parallel``, ``n_predict``, ``main_gpu``;
``flash_attn`` (True, False or "auto"; a bare ``-fa`` of older builds is on); text ``cache_type_k``,
``cache_type_v``, ``split_mode``, ``device`` (verbatim); ``tensor_split`` (proportions, ``-ts 3,1`` or ``3/1``);
booleans ``mmap`` (also ``-lm MODE``, llama-bench ``-mmp 0|1``), ``mlock``, ``kv_offload``, ``op_offload``,
``cont_batching``, ``fit``, ``kv_unified``; ``fit_target_mib`` (``-fitt``: MiB per device, a list) and ``fit_ctx``.
"""

from __future__ import annotations

import math
import re
import shlex
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.config.llamacpp import MAX_BENCH_VALUES
from sim.core.errors import ScenarioError
from sim.core.shell import ENV as _ENV
from sim.core.shell import FLOAT as _FLOAT
from sim.core.shell import INT as _INT
from sim.core.shell import physical_lines, shell_tail, split_words
from sim.llamacpp.cmdline_batched import FLAG_ROWS, batched_sizes

SOURCE = "command line"  # the "file" an error names
MAX_LINE_CHARS = 100_000  # a pasted command line, at most (characters; shlex reads some 100k a second)
MAX_VALUES = MAX_BENCH_VALUES  # values one llama-bench flag (or sweep-bench's depths) may expand to: a scenario's too
ALL_LAYERS = 999  # what ``-ngl all`` is read as: any count at or above the model's layers puts every layer on a GPU
AUTO_LAYERS = -1  # what ``-ngl auto`` is read as; llama.cpp's own value for auto (older builds: "default")
INT32_MAX = 2**31 - 1
PROGRAMS = ("llama-server", "llama-cli", "llama-bench", "llama-sweep-bench", "llama-batched-bench")
_PROGRAM_NAMES = {**{program: program for program in PROGRAMS}, "server": "llama-server", "main": "llama-cli",
                  "sweep-bench": "llama-sweep-bench", "batched-bench": "llama-batched-bench"}
BENCH_DEFAULTS: dict[str, list[int]] = {"n_prompt": [512], "n_gen": [128], "n_depth": [0], "repetitions": [5]}
SPLIT_MODES = ("none", "layer", "row", "tensor", "graph", "attn")  # graph, attn: ik_llama.cpp
_FA = {**dict.fromkeys(("on", "enabled", "true", "1"), True), **dict.fromkeys(("off", "disabled", "false", "0"), False),
       "auto": "auto", "-1": "auto"}  # llama.cpp's is_truthy / is_falsey / is_autoy
_ONOFF = {word: value for word, value in _FA.items() if value != "auto"}
_BOOL01 = {"1": True, "true": True, "0": False, "false": False}
_LOAD_MODES = {"auto": (True, False), "mmap": (True, False), "none": (False, False), "mlock": (False, True),
               "mmap+mlock": (True, True), "dio": (False, False)}  # -lm MODE -> (mmap, mlock)
_SPLIT = {mode: mode for mode in SPLIT_MODES}


@dataclass
class LlamaCommand:
    """A parsed command line: ``settings`` only keys given on the line; ``sweeps`` a llama-bench key given several
    values; ``bench`` the test sizes (tokens) and repetitions; ``ignored`` flags that change neither speed nor memory,
    with their values; ``unknown`` everything else, verbatim; ``env`` variables assigned before the program."""

    program: str
    model_path: str | None
    settings: dict[str, Any] = field(default_factory=dict)
    sweeps: dict[str, list] = field(default_factory=dict)
    bench: dict[str, list] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def _table(rows: str, ignore: str) -> dict[str, tuple[str, str]]:
    """flag -> (key, kind) from rows ``key kind flag...`` (separated by ``;`` or lines), and the ignored flags."""
    table = dict.fromkeys(ignore.split(), ("", "ignore"))
    for row in rows.replace("\n", ";").split(";"):
        if not row.strip():
            continue
        key, kind, *names = row.split()
        table.update(dict.fromkeys(names, (key, kind)))
    return table


# kinds: int / int0 (>= 0) / int1 (>= 1), ngl, fa and onoff (a value optional), on / off (a bare flag setting True /
# False), ctype, sm, str, ot, ts, lm, model, bench_int1 (to ``bench``)
_COMMON = _table("""
n_gpu_layers ngl -ngl --gpu-layers --n-gpu-layers; n_cpu_moe int0 -ncmoe --n-cpu-moe; cpu_moe on -cmoe --cpu-moe
override_tensor ot -ot --override-tensor; ctx_size int0 -c --ctx-size; batch_size int1 -b --batch-size
ubatch_size int1 -ub --ubatch-size; threads int -t --threads; threads_batch int -tb --threads-batch
flash_attn fa -fa --flash-attn; flash_attn off -no-fa --no-flash-attn; cache_type_k ctype -ctk --cache-type-k
cache_type_v ctype -ctv --cache-type-v; parallel int -np --parallel; mmap on --mmap; mmap off --no-mmap
mmap lm -lm --load-mode; mlock on --mlock; tensor_split ts -ts --tensor-split; split_mode sm -sm --split-mode
main_gpu int0 -mg --main-gpu; kv_offload on -kvo --kv-offload; kv_offload off -nkvo --no-kv-offload
op_offload on --op-offload; op_offload off -nopo --no-op-offload; n_predict int -n --predict --n-predict
cont_batching on -cb --cont-batching; cont_batching off -nocb --no-cont-batching; device str -dev --device
fit onoff -fit --fit; fit_target_mib fitt -fitt --fit-target; fit_ctx int1 -fitc --fit-ctx
kv_unified on -kvu --kv-unified; kv_unified off -no-kvu --no-kv-unified; model model -m --model
""", """--host --port -a --alias --temp --temperature -s --seed --min-p --presence-penalty --frequency-penalty -l
--logit-bias -j -jf -rea -lv --verbosity -p --prompt -f --file -sys -sysf -r --reverse-prompt --in-prefix
--in-suffix --path -to --timeout --threads-http --media-path --keep --cache-reuse --pooling --tags --output-format
-hft -v --metrics --props -h --help --usage --version --list-devices --offline -cnv -no-cnv -i -if -co --color -sp
--special --ignore-eos --simple-io --no-display-prompt -e --spm-infill -st --single-turn -mli --multiline-input
--sweep-memory --minilog -wb --embedding --embeddings --rerank --reranking --reuse-port --send-done --hf-token""")
_SWEEP = _COMMON | _table("repetitions bench_int1 -nrep --n-repetitions\nsweep_stride bench_int1 --sweep-stride", "")
_BATCHED = _COMMON | _table(FLAG_ROWS, "")  # llama-batched-bench: sim.llamacpp.cmdline_batched
# llama-bench kinds: ilist / ilist_neg (int lists and ranges), ctypes, sms, fas, bools / not_bools (0|1), lms, tss,
# ots, devs, models, bench_ilist (to ``bench``), pg, reps, main_gpu (replaces, as llama-bench does)
_BENCH = _table("""
model_path models -m --model; n_prompt bench_ilist -p --n-prompt; n_gen bench_ilist -n --n-gen; prompt_gen pg -pg
n_depth bench_ilist -d --n-depth; repetitions reps -r --repetitions; batch_size ilist -b --batch-size
ubatch_size ilist -ub --ubatch-size; cache_type_k ctypes -ctk --cache-type-k; cache_type_v ctypes -ctv --cache-type-v
threads ilist -t --threads; n_gpu_layers ilist_neg -ngl --n-gpu-layers; n_cpu_moe ilist -ncmoe --n-cpu-moe
split_mode sms -sm --split-mode; main_gpu main_gpu -mg --main-gpu; kv_offload not_bools -nkvo --no-kv-offload
flash_attn fas -fa --flash-attn; mmap bools -mmp --mmap; mmap lms -lm --load-mode; tensor_split tss -ts --tensor-split
override_tensor ots -ot --override-tensor; op_offload not_bools -nopo --no-op-offload; device devs -dev --device
""", "-o --output -oe --output-err --delay -hft --hf-token -v --verbose --progress --no-warmup -h --help")
_IGNORED = re.compile(r"--(no-)?(dry|xtc|mirostat|dynatemp|log|cors|ssl|reasoning|chat-template|models|mcp|webui|ui|"
                      r"tools|sse|slots?|api|json-schema|grammar|samplers?|sampler|sampling|cache-prompt|context-shift|"
                      r"jinja|warmup|perf|escape|top|repeat|system-prompt|typical|interactive|conversation|verbose|"
                      r"embd)(-[a-z-]+)?")  # more flags that change neither speed nor memory (sampling, logs, the UI)
_CTYPE = re.compile(r"[A-Za-z0-9_]+")
_RANGE = re.compile(r"(-?[0-9]+)(?:-([0-9]+)(?:([+*])([0-9]+))?)?")


def _err(flag: str, problem: str) -> ScenarioError:
    return ScenarioError(SOURCE, flag, problem)


def _show(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


def _to_int(flag: str, value: str, low: int | None = None) -> int:
    """``value`` as an int within int32 and at least ``low``, else a one-line error naming ``flag``."""
    if not _INT.fullmatch(value) or abs(int(value)) > INT32_MAX:
        raise _err(flag, f"expected an integer, got {_show(value)}")
    if low is not None and int(value) < low:
        raise _err(flag, f"expected an integer >= {low}, got {int(value)}")
    return int(value)


def _to_float(flag: str, value: str) -> float:
    if not _FLOAT.fullmatch(value) or not math.isfinite(float(value)) or float(value) < 0:
        raise _err(flag, f"expected a non-negative number, got {_show(value)}")
    return float(value)


def _word(flag: str, value: str, words: dict[str, Any], expected: str = "") -> Any:
    if value.lower() not in words:
        raise _err(flag, f"expected {expected or 'one of ' + ', '.join(words)}, got {_show(value)}")
    return words[value.lower()]


def _to_ngl(flag: str, value: str) -> int:
    if value.lower() in ("all", "auto"):
        return ALL_LAYERS if value.lower() == "all" else AUTO_LAYERS
    if not _INT.fullmatch(value):
        raise _err(flag, f"expected a number of layers, 'auto' or 'all', got {_show(value)}")
    return _to_int(flag, value)


def _to_ctype(flag: str, value: str) -> str:
    if not _CTYPE.fullmatch(value):
        raise _err(flag, f"expected a cache type such as f16, q8_0 or q4_0, got {_show(value)}")
    return value


def _to_ts(flag: str, value: str, separators: str) -> list[float]:
    parts = re.split(f"[{separators}]+", value)
    if not value or not all(parts):
        raise _err(flag, f"expected proportions such as 3,1 or 3/1, got {_show(value)}")
    return [_to_float(flag, part) for part in parts]


def split_rules(value: str) -> list[str]:
    """``value`` cut at the commas that separate rules: not a comma inside ``()``, ``[]`` or ``{}`` of a regex
    (``blk\\.[0-9]{1,2}\\.ffn=CPU`` is one rule) nor one escaped by ``\\``."""
    pieces, start, depth, in_class, i = [], 0, 0, False, 0
    while i < len(value):
        char = value[i]
        if char == "\\":
            i += 1  # an escaped character is no separator
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char in "({":
            depth += 1
        elif char in ")}":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            pieces.append(value[start:i])
            start = i + 1
        i += 1
    return [*pieces, value[start:]]


def _check_rule(flag: str, rule: str) -> str:
    pattern, eq, buffer = rule.partition("=")
    if not eq or not pattern or not buffer or "=" in buffer or any(c.isspace() for c in buffer):
        raise _err(flag, f"expected rules 'regex=BUFFER' (such as exps=CPU) separated by commas, got {_show(rule)}")
    return rule


def _int_range(flag: str, value: str, allow_negative: bool) -> list[int]:
    """llama-bench's ``first[-last[(+|*)step]]`` values, comma separated (a trailing comma allowed), expanded."""
    parts = value.split(",")
    out: list[int] = []
    for part in parts[:-1] if len(parts) > 1 and parts[-1] == "" else parts:
        match = _RANGE.fullmatch(part)
        if not match or (part.startswith("-") and not allow_negative):
            raise _err(flag, f"expected integers, comma lists or ranges first-last[+step], got {_show(value)}")
        number = _to_int(flag, match[1])
        last = _to_int(flag, match[2]) if match[2] else number
        step = _to_int(flag, match[4]) if match[4] else 1
        while number <= last:
            out.append(number)
            following = number + step if (match[3] or "+") == "+" else number * step
            if following <= number:
                raise _err(flag, f"expected a range whose values increase, got {_show(part)}")
            if len(out) > MAX_VALUES:
                raise _err(flag, f"expected at most {MAX_VALUES} values, got more from {_show(part)}")
            number = following
    return out


_READ: dict[str, Callable[[str, str], Any]] = {
    "int": _to_int, "int0": lambda f, v: _to_int(f, v, 0), "int1": lambda f, v: _to_int(f, v, 1), "ngl": _to_ngl,
    "ctype": _to_ctype, "sm": lambda f, v: _word(f, v, _SPLIT), "str": lambda f, v: v,
    "ts": lambda f, v: _to_ts(f, v, ",/"), "fitt": lambda f, v: _to_ts(f, v, ",/"),
}
_READ_EACH: dict[str, Callable[[str, str], Any]] = {  # llama-bench: one value of a comma list
    "ctypes": _to_ctype, "sms": _READ["sm"], "fas": lambda f, v: _word(f, v, _FA, "on, off or auto"),
    "bools": lambda f, v: _word(f, v, _BOOL01, "0 or 1"), "not_bools": lambda f, v: not _word(f, v, _BOOL01, "0 or 1"),
    "lms": lambda f, v: _word(f, v, _LOAD_MODES)[0], "tss": lambda f, v: _to_ts(f, v, ";/"), "devs": _READ["str"],
    "models": _READ["str"], "counts": lambda f, v: _to_int(f, v, 0),  # counts: llama-batched-bench's -npp
}


def _program_of(token: str) -> str | None:
    base = re.split(r"[\\/]", token)[-1].lower()
    return _PROGRAM_NAMES.get(base[:-4] if base.endswith(".exe") else base)


def _command_tokens(line: str) -> tuple[str, list[str], list[str]]:
    """(program, the words before it, the words after it) of the first line of ``line`` that names a program."""
    for physical in physical_lines(line, SOURCE, MAX_LINE_CHARS):
        try:
            tokens = split_words(physical)
        except ValueError as exc:
            if any(_program_of(word) for word in physical.split()):
                raise ScenarioError(SOURCE, "", f"expected balanced quotes ({exc})") from None
            continue
        for index, token in enumerate(tokens):
            if _program_of(token):
                return _program_of(token), tokens[:index], tokens[index + 1:]
    raise ScenarioError(SOURCE, "program", f"expected a command of one of {', '.join(PROGRAMS)}")


def _looks_like_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _FLOAT.fullmatch(token)


def _name_of(token: str, table: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
    """(flag name, value given after ``=``) of ``token``; ``--long_name`` reads as ``--long-name``."""
    name, eq, inline = token.partition("=")
    name = name.replace("_", "-") if name.startswith("--") else name
    if eq and (name.startswith("--") or name in table):
        return name, inline
    return (token.replace("_", "-") if token.startswith("--") else token), None


def _apply(args: deque[str], cmd: LlamaCommand, key: str, kind: str, name: str, token: str, inline: str | None,
           values: dict[str, list]) -> None:
    """Read one recognised flag of llama-server / llama-cli / llama-sweep-bench (``values`` unused) or of
    llama-bench (``values`` collects each key's values)."""
    settings = cmd.settings
    if kind in ("on", "off"):
        if inline is not None:
            raise _err(name, f"expected no value after {name}, got {_show(inline)}")
        settings[key] = kind == "on"
        return
    if kind in ("fa", "onoff"):  # a value is optional: a bare -fa (older builds), --fit (ik_llama.cpp) is on
        words = _FA if kind == "fa" else _ONOFF
        if inline is None and args and args[0].lower() in words:
            inline = args.popleft()
        settings[key] = True if inline is None else _word(name, inline, words, "on, off" + " or auto" * (kind == "fa"))
        return
    if inline is None and not args:
        raise _err(name, f"expected a value after {token}")
    value = args.popleft() if inline is None else inline
    if kind == "model":
        cmd.model_path = value
    elif kind == "ot":
        settings[key] = settings.get(key, []) + [_check_rule(name, rule) for rule in split_rules(value)]
    elif kind == "lm":
        settings["mmap"], mlock = _word(name, value, _LOAD_MODES)
        settings.update({"mlock": True} if mlock else {})
    elif kind in ("bench_int1", "reps"):
        cmd.bench[key] = [_to_int(name, value, 1)]
    elif kind == "pg":
        pair = value.split(",")
        if len(pair) != 2:
            raise _err(name, f"expected pp,tg (two token counts), got {_show(value)}")
        cmd.bench.setdefault(key, []).append([_to_int(name, pair[0], 0), _to_int(name, pair[1], 0)])
    elif kind in ("ilist", "ilist_neg", "bench_ilist", "main_gpu"):
        numbers = _int_range(name, value, kind == "ilist_neg")
        target = cmd.bench if kind == "bench_ilist" else values
        target[key] = numbers if kind == "main_gpu" else target.get(key, []) + numbers
    elif kind == "ots":
        values.setdefault(key, []).extend(
            [_check_rule(name, rule) for rule in group.split(";") if rule] for group in split_rules(value))
    elif kind in _READ_EACH:
        parts = value.split(",")
        if not all(parts):
            raise _err(name, f"expected a comma list without empty values, got {_show(value)}")
        values.setdefault(key, []).extend(_READ_EACH[kind](name, part) for part in parts)
    else:
        settings[key] = _READ[kind](name, value)


def _parse(tokens: list[str], cmd: LlamaCommand, table: dict[str, tuple[str, str]]) -> dict[str, list]:
    """Read the words after the program; the values each llama-bench key was given."""
    args, values = deque(tokens), {}
    while args:
        token = args.popleft()
        if shell_tail(args, token, cmd.ignored):
            continue
        name, inline = _name_of(token, table)
        key, kind = table.get(name, ("", "ignore" if _IGNORED.fullmatch(name) else ""))
        if kind in ("", "ignore"):  # the value of an ignored or unknown flag: a word that does not look like a flag
            if inline is None and args and (kind or _looks_like_flag(token)) and not _looks_like_flag(args[0]):
                token = shlex.join([token, args.popleft()])
            (cmd.ignored if kind else cmd.unknown).append(token)
        else:
            _apply(args, cmd, key, kind, name, token, inline, values)
    return values


def _bench_sizes(cmd: LlamaCommand, values: dict[str, list]) -> None:
    """llama-bench: a key with one value is a setting, with several a sweep; defaults for the test sizes."""
    for key, given in values.items():
        if len(given) > 1:
            cmd.sweeps[key] = given
        elif given and key != "model_path":
            cmd.settings[key] = given[0]
    cmd.model_path = values.get("model_path", [None])[0]
    for key, default in BENCH_DEFAULTS.items():
        cmd.bench[key] = cmd.bench.get(key) or list(default)


def bench_flag(key: str) -> str:
    """llama-bench's (short) flag of a settings key: ``-ub`` for ``ubatch_size``."""
    return next((flag for flag, (k, _) in _BENCH.items() if k == key), key)


def _sweep_bench_sizes(cmd: LlamaCommand) -> None:
    """ik_llama.cpp's llama-sweep-bench: batches of ``-ub`` prompt tokens and ``-n`` (default ub/4) generated ones at
    each depth 0, ub, 2 ub, ... below ``-c`` (every ``--sweep-stride``-th); ``-nrep`` repetitions (default 1)."""
    ubatch, n_predict = cmd.settings.get("ubatch_size", 512), cmd.settings.get("n_predict", -1)
    cmd.bench.update(n_prompt=[ubatch], n_gen=[n_predict if n_predict > 0 else ubatch // 4])
    depths = range(0, cmd.settings.get("ctx_size", 0), ubatch * cmd.bench.pop("sweep_stride", [1])[0])
    if len(depths) > MAX_VALUES:
        raise _err("-c", f"expected at most {MAX_VALUES} sweep depths (-c / -ub), got {len(depths)}")
    if depths:
        cmd.bench["n_depth"] = list(depths)
    cmd.bench.setdefault("repetitions", [1])


def parse_command(line: str) -> LlamaCommand:
    """The program, model, settings, llama-bench sweeps and bench sizes of a pasted command line (the first line of
    ``line`` that names one of :data:`PROGRAMS`). A flag missing its value or given a value of the wrong type raises
    :class:`ScenarioError` naming the flag."""
    program, before, after = _command_tokens(line)
    cmd = LlamaCommand(program=program, model_path=None)
    for token in before:
        if _ENV.match(token):
            cmd.env[token.partition("=")[0]] = token.partition("=")[2]
        elif not token.endswith(("$", "#", ">", "%")):  # a shell prompt is dropped; a wrapper (taskset ...) kept
            cmd.unknown.append(token)
    table = {"llama-bench": _BENCH, "llama-sweep-bench": _SWEEP, "llama-batched-bench": _BATCHED}.get(program, _COMMON)
    values = _parse(after, cmd, table)
    if program == "llama-bench":
        _bench_sizes(cmd, values)
    elif program == "llama-sweep-bench":
        _sweep_bench_sizes(cmd)
    elif program == "llama-batched-bench":
        batched_sizes(cmd.bench, cmd.settings, values, MAX_VALUES)
    return cmd


# what to_command writes for a key: flag and how for llama-server / llama-cli / llama-sweep-bench, then for llama-bench
# ("-": it has no such flag); how: int / int0 / int1, pair (on/off flags), true (only True writes), onoff, 01 / not01
# (0|1), fa / fa01, ctype, sm, str, ts, rules
_OUT: dict[str, tuple[str, str, str | None, str]] = {
    key: (flag.replace("/", " "), how, None if bench_flag == "-" else bench_flag, bench_how)
    for key, flag, how, bench_flag, bench_how in (row.split() for row in """
n_gpu_layers --n-gpu-layers int --n-gpu-layers int; n_cpu_moe --n-cpu-moe int0 --n-cpu-moe int0
cpu_moe --cpu-moe true - -; override_tensor --override-tensor rules --override-tensor rules
ctx_size --ctx-size int0 - -; batch_size --batch-size int1 --batch-size int1
ubatch_size --ubatch-size int1 --ubatch-size int1; threads --threads int --threads int0
threads_batch --threads-batch int - -; flash_attn --flash-attn fa --flash-attn fa01
cache_type_k --cache-type-k ctype --cache-type-k ctype; cache_type_v --cache-type-v ctype --cache-type-v ctype
parallel --parallel int - -; mmap --mmap/--no-mmap pair --mmap 01; mlock --mlock true - -
tensor_split --tensor-split ts --tensor-split ts; split_mode --split-mode sm --split-mode sm
main_gpu --main-gpu int0 --main-gpu int0; kv_offload --kv-offload/--no-kv-offload pair --no-kv-offload not01
op_offload --op-offload/--no-op-offload pair --no-op-offload not01; n_predict --n-predict int - -
cont_batching --cont-batching/--no-cont-batching pair - -; device --device str --device str; fit --fit onoff - -
kv_unified --kv-unified/--no-kv-unified pair - -; fit_target_mib --fit-target ts - -; fit_ctx --fit-ctx int1 - -
""".replace("\n", ";").split(";") if row.strip())}


def _setting_flags(key: str, value: Any, flag: str, how: str, bench: bool) -> list[str]:
    """The words for one setting; a ScenarioError naming ``key`` when ``value`` is not valid for it."""
    def bad(expected: str) -> ScenarioError:
        return ScenarioError("settings", key, f"expected {expected}, got {value!r}")

    if how.startswith("int"):
        low = {"int": -INT32_MAX, "int0": 0, "int1": 1}[how]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT32_MAX:
            raise bad(f"an integer >= {low}")
        return [flag, str(value)]
    if how in ("pair", "true", "01", "not01", "onoff", "fa", "fa01"):
        if not isinstance(value, bool) and not (how.startswith("fa") and value == "auto"):
            raise bad("true, false or 'auto'" if how.startswith("fa") else "true or false")
        words = {"pair": flag.split()[::-1], "true": ["", flag], "onoff": ["off", "on"], "01": ["0", "1"],
                 "not01": ["1", "0"], "fa": ["off", "on", "auto"], "fa01": ["0", "1", "auto"]}[how]  # false, true, auto
        word = words[2 if value == "auto" else int(value)]
        return ([word] if word else []) if how in ("pair", "true") else [flag, word]
    if how in ("ctype", "sm", "str"):
        valid = {"ctype": isinstance(value, str) and _CTYPE.fullmatch(value), "sm": value in SPLIT_MODES,
                 "str": isinstance(value, str) and value and "\n" not in value and not (bench and "," in value)}[how]
        if not valid:
            raise bad({"ctype": "a cache type such as q8_0", "sm": f"one of {', '.join(SPLIT_MODES)}",
                       "str": "a device list such as CUDA0" + (" (devices separated by '/')" if bench else "")}[how])
        return [flag, value]
    if how == "ts":
        if not isinstance(value, list) or not value or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e300 for v in value):
            raise bad("a list of non-negative proportions")
        return [flag, ("/" if bench else ",").join(repr(float(v)) for v in value)]
    if not isinstance(value, list) or not value or not all(
            isinstance(rule, str) and "\n" not in rule and split_rules(rule) == [rule] and not (bench and ";" in rule)
            for rule in value):
        raise bad("a list of 'regex=BUFFER' rules, none with a separating comma")
    for rule in value:
        _check_rule(key, rule)
    return [flag, ";".join(value)] if bench else [word for rule in value for word in (flag, rule)]


def to_command(settings: dict[str, Any], program: str = "llama-server", model_path: str = "MODEL.gguf") -> str:
    """The command line to paste for ``settings`` (keys as :func:`parse_command` gives them): long flags, values
    quoted for a POSIX shell (``-ot`` rules with :func:`shlex.quote`); ``parse_command(to_command(s, p)).settings ==
    s`` for valid settings. ``cpu_moe`` and ``mlock`` false are llama.cpp's defaults and write nothing. llama-bench
    takes only the keys it has a flag for."""
    if program not in PROGRAMS:
        raise ScenarioError("settings", "program", f"expected one of {', '.join(PROGRAMS)}, got {program!r}")
    if not isinstance(settings, dict):
        raise ScenarioError("settings", "", f"expected a mapping of settings, got {type(settings).__name__}")
    if not isinstance(model_path, str) or not model_path or "\n" in model_path:
        raise ScenarioError("settings", "model_path", f"expected a file path on one line, got {model_path!r}")
    bench = program == "llama-bench"
    offered = [key for key, out in _OUT.items() if not bench or out[2]]
    for key in settings:
        if key not in offered:
            raise ScenarioError("settings", key, f"expected a setting {program} has: {', '.join(offered)}")
    words = [program, "-m", model_path]
    for key in offered:
        if key in settings:
            flag, how = _OUT[key][2:] if bench else _OUT[key][:2]
            words += _setting_flags(key, settings[key], flag, how, bench)
    return shlex.join(words)
