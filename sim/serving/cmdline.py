"""Read a pasted vLLM or SGLang server command line into the settings that decide speed and memory.

Programs: ``vllm serve MODEL``, ``python -m vllm.entrypoints.openai.api_server --model MODEL`` (also ``python3``,
``python3.12``, a path in front), ``python -m sglang.launch_server --model-path MODEL`` and ``sglang serve
--model-path MODEL`` (SGLang 0.5.5 and later: ``sglang/cli/main.py`` of the 0.5.5 wheel has the ``serve``
sub-command, 0.5.4's has none). Environment assignments before the program (``VLLM_USE_V1=0 vllm serve ...``) are
kept in ``env``; a line continued with ``\\``, POSIX quoting, ``#`` comments, ``--flag value`` and ``--flag=value``
and the short forms ``-tp``, ``-pp``, ``-dp``, ``-q`` are read.

Flag spellings follow ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``) and SGLang's
``python/sglang/srt/server_args.py`` (0.5.23: ``sglang/srt/arg_groups/fields/``). A flag given twice keeps its last
value. A flag whose effect on speed or memory is nil (host, port, API keys, templates, logging, ...) goes to
``ignored``; a flag this module does not know goes to ``unknown``, verbatim (never an error); a known flag missing
its value, or given a value of the wrong type, raises :class:`ScenarioError` naming the flag.

Settings keys (engine-neutral; :data:`KEYS` gives each one's unit): ``max_num_seqs`` (vLLM ``--max-num-seqs``,
SGLang ``--max-running-requests``), ``max_num_batched_tokens``, ``chunked_prefill_size`` (SGLang, -1 disables),
``max_prefill_tokens``, ``gpu_memory_utilization``, ``mem_fraction_static``, ``tensor_parallel``,
``pipeline_parallel``, ``data_parallel``, ``enable_prefix_caching``, ``enable_chunked_prefill``,
``kv_cache_dtype``, ``max_model_len`` (SGLang ``--context-length``), ``block_size`` (SGLang ``--page-size``),
``num_gpu_blocks_override``, ``kv_cache_memory_bytes``, ``max_total_tokens``, ``dtype``, ``quantization``,
``speculative`` (a dict: ``method``, ``num_speculative_tokens``, ``num_steps``), ``enforce_eager`` (SGLang
``--disable-cuda-graph``), ``cuda_graph_max_bs``, ``swap_space_gib``, ``preemption_mode``, ``cpu_offload_gib``,
``enable_lora``, ``scheduling_policy``, ``enable_mixed_chunk``.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.core.errors import ScenarioError
from sim.core.shell import ENV as _ENV
from sim.core.shell import FLOAT as _FLOAT
from sim.core.shell import INT as _INT
from sim.core.shell import SHELL_STOP as _SHELL_STOP
from sim.core.shell import physical_lines, shell_tail, split_words

SOURCE = "command line"  # the "file" an error names
MAX_LINE_CHARS = 100_000  # a pasted command line, at most (characters)
INT32_MAX = 2**31 - 1
ENGINES = ("vllm", "sglang")
VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
SGLANG_MODULES = ("sglang.launch_server",)
KEYS: dict[str, str] = {  # settings key -> unit (what the output says next to the value)
    "max_num_seqs": "sequences", "max_num_batched_tokens": "tokens", "chunked_prefill_size": "tokens",
    "max_prefill_tokens": "tokens", "gpu_memory_utilization": "fraction", "mem_fraction_static": "fraction",
    "tensor_parallel": "GPUs", "pipeline_parallel": "stages", "data_parallel": "replicas",
    "enable_prefix_caching": "", "enable_chunked_prefill": "", "kv_cache_dtype": "", "max_model_len": "tokens",
    "block_size": "tokens", "num_gpu_blocks_override": "blocks", "kv_cache_memory_bytes": "bytes",
    "max_total_tokens": "tokens", "dtype": "", "quantization": "", "speculative": "", "enforce_eager": "",
    "cuda_graph_max_bs": "sequences", "swap_space_gib": "GiB", "preemption_mode": "", "cpu_offload_gib": "GiB",
    "enable_lora": "", "scheduling_policy": "", "enable_mixed_chunk": "",
}
_VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
_SGLANG_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
_BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_HUMAN = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,6})?)([kKmMgG])")  # vLLM's human_readable_int: 1k = 1,000, 1K = 1,024
_WORD = re.compile(r"[A-Za-z0-9_.:+-]{1,64}")
_PYTHON = re.compile(r"python(?:[0-9](?:\.[0-9]{1,2})?)?(?:\.exe)?")


@dataclass
class ServingCommand:
    """A parsed command line: ``engine`` vllm or sglang; ``program`` as a person names it; ``model`` the Hugging Face
    repository or path given; ``settings`` only keys given on the line; ``flags`` each key's flag as written;
    ``ignored`` flags without effect on speed or memory, with their values; ``unknown`` everything else,
    verbatim; ``env`` variables assigned before the program."""

    engine: str
    program: str
    model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def _table(rows: str) -> dict[str, tuple[str, str]]:
    """flag -> (key, kind) from rows ``key kind flag...`` separated by ``;`` or lines."""
    table: dict[str, tuple[str, str]] = {}
    for row in rows.replace("\n", ";").split(";"):
        if row.strip():
            key, kind, *names = row.split()
            table.update(dict.fromkeys(names, (key, kind)))
    return table


# kinds: int1 (>= 1), int0 (>= 0), hint (vLLM's human-readable int: 8k, 2K), len (hint or auto / -1), frac (0-1],
# gib (>= 0), bool (--x / --no-x, an optional true|false after it), on / off (a bare flag), word (a name), choice
# lists in _CHOICES, json (vLLM's --speculative-config), model, spec_* (parts of ``speculative``)
_VLLM = _table("""
model model --model; max_num_seqs int1 --max-num-seqs; max_num_batched_tokens hint --max-num-batched-tokens
gpu_memory_utilization frac --gpu-memory-utilization; tensor_parallel int1 --tensor-parallel-size -tp
pipeline_parallel int1 --pipeline-parallel-size -pp; data_parallel int1 --data-parallel-size -dp
enable_prefix_caching bool --enable-prefix-caching; enable_prefix_caching off --no-enable-prefix-caching
enable_chunked_prefill bool --enable-chunked-prefill; enable_chunked_prefill off --no-enable-chunked-prefill
kv_cache_dtype word --kv-cache-dtype; max_model_len len --max-model-len; block_size int1 --block-size
num_gpu_blocks_override int1 --num-gpu-blocks-override; kv_cache_memory_bytes hint --kv-cache-memory-bytes
dtype vdtype --dtype; quantization word --quantization -q; speculative json --speculative-config
speculative spec_model --speculative-model; speculative spec_tokens --num-speculative-tokens
enforce_eager bool --enforce-eager; enforce_eager off --no-enforce-eager; swap_space_gib gib --swap-space
preemption_mode preempt --preemption-mode; cpu_offload_gib gib --cpu-offload-gb; enable_lora bool --enable-lora
enable_lora off --no-enable-lora; scheduling_policy word --scheduling-policy
""")
_SGLANG = _table("""
model model --model-path --model; tensor_parallel int1 --tp-size --tp --tensor-parallel-size
data_parallel int1 --dp-size --dp --data-parallel-size; pipeline_parallel int1 --pp-size --pipeline-parallel-size
mem_fraction_static frac --mem-fraction-static; max_num_seqs int1 --max-running-requests
max_total_tokens hint --max-total-tokens; chunked_prefill_size chunk --chunked-prefill-size
max_prefill_tokens hint --max-prefill-tokens; enable_prefix_caching off --disable-radix-cache
kv_cache_dtype word --kv-cache-dtype; max_model_len hint --context-length; scheduling_policy word --schedule-policy
speculative spec_algo --speculative-algorithm; speculative spec_steps --speculative-num-steps
speculative spec_tokens --speculative-num-draft-tokens; speculative spec_model --speculative-draft-model-path
enforce_eager on --disable-cuda-graph; cuda_graph_max_bs int1 --cuda-graph-max-bs; block_size int1 --page-size
dtype sdtype --dtype; quantization word --quantization; enable_mixed_chunk on --enable-mixed-chunk
enable_lora on --enable-lora
""")
_CHOICES = {"vdtype": _VLLM_DTYPES, "sdtype": _SGLANG_DTYPES, "preempt": ("recompute", "swap")}
# flags without effect on speed or memory (both engines), then name patterns of more of them
_NO_EFFECT = set("""--host --port --uds --api-key --admin-api-key --served-model-name --chat-template
--chat-template-content-format --completion-template --response-role --tokenizer --tokenizer-path --tokenizer-mode
--tokenizer-revision --trust-remote-code --download-dir --load-format --revision --code-revision --seed --random-seed
--config-format --hf-config-path --hf-token --hf-overrides --root-path --middleware --allowed-origins
--allowed-methods --allowed-headers --allow-credentials --max-log-len --log-level --log-level-http --log-requests
--log-requests-level --log-config-file --disable-log-stats --disable-log-requests --enable-log-requests
--enable-metrics --show-time-cost --decode-log-interval --enable-auto-tool-choice --tool-call-parser
--tool-parser-plugin --reasoning-parser --enable-reasoning --guided-decoding-backend --grammar-backend
--generation-config --override-generation-config --max-logprobs --logprobs-mode --return-tokens-as-token-ids
--disable-frontend-multiprocessing --disable-fastapi-docs --enable-request-id-headers --enable-force-include-usage
--enable-server-load-tracking --enable-prompt-tokens-details --disable-uvicorn-access-log --uvicorn-log-level
--otlp-traces-endpoint --collect-detailed-traces --show-hidden-metrics-for-version --headless --worker-cls
--distributed-executor-backend --max-parallel-loading-workers --use-tqdm-on-load --model-loader-extra-config
--ignore-patterns --safetensors-load-strategy --allowed-local-media-path --skip-tokenizer-init
--skip-server-warmup --warmups --watchdog-timeout --dist-timeout --nccl-port --dist-init-addr --nnodes
--node-rank --base-gpu-id --gpu-id-step --file-storage-path --enable-cache-report --crash-dump-folder
--preferred-sampling-params --constrained-json-whitespace-pattern --allow-auto-truncate --device
--enable-sleep-mode --sleep-on-idle --lora-modules --prompt-adapters --disable-custom-all-reduce
--ray-workers-use-nsight --enable-request-time-stats-logging --kv-events-config --enable-p2p-check
--limit-mm-per-prompt --mm-processor-kwargs""".split())
_NO_EFFECT_NAMES = re.compile(r"--(no-)?(ssl|log|uvicorn|tool|reasoning|chat-template|api|allowed|otlp|"
                              r"prometheus|metrics|bucket|tokenizer|enable-log|disable-log|disable-fastapi|"
                              r"enable-cache-report|served-model)(-[a-z0-9-]+)?")


def _err(flag: str, problem: str) -> ScenarioError:
    return ScenarioError(SOURCE, flag, problem)


def _show(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:57] + "...")


def _to_int(flag: str, value: str, low: int = 1) -> int:
    if not _INT.fullmatch(value) or abs(int(value)) > INT32_MAX:
        raise _err(flag, f"expected an integer, got {_show(value)}")
    if int(value) < low:
        raise _err(flag, f"expected an integer >= {low}, got {int(value)}")
    return int(value)


def _to_hint(flag: str, value: str) -> int:
    """vLLM's ``human_readable_int``: digits, or a number and k / m / g (powers of 1,000) or K / M / G (of 1,024)."""
    match = _HUMAN.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix.isupper() and "." in number:
            raise _err(flag, f"expected a whole number before {suffix} (a binary multiple), got {_show(value)}")
        scale = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}[suffix]
        total = int(float(number) * scale) if suffix.islower() else int(number) * scale
        if not 1 <= total <= 10**15:
            raise _err(flag, f"expected a count from 1 to 10^15, got {_show(value)}")
        return total
    if not _INT.fullmatch(value):
        raise _err(flag, f"expected a count of tokens such as 8192 or 8k, got {_show(value)}")
    return _to_int(flag, value)


def _to_frac(flag: str, value: str) -> float:
    if not _FLOAT.fullmatch(value) or not 0 < float(value) <= 1:
        raise _err(flag, f"expected a fraction above 0 and at most 1, got {_show(value)}")
    return float(value)


def _to_gib(flag: str, value: str) -> float:
    if not _FLOAT.fullmatch(value) or not math.isfinite(float(value)) or not 0 <= float(value) <= 1e6:
        raise _err(flag, f"expected GiB, 0 or more, got {_show(value)}")
    return float(value)


def _to_word(flag: str, value: str) -> str:
    if not _WORD.fullmatch(value):
        raise _err(flag, f"expected a name such as fp8 or auto, got {_show(value)}")
    return value


def _to_len(flag: str, value: str) -> int | None:
    """``--max-model-len``: a count, or ``auto`` / -1 (the model's own)."""
    return None if value.lower() == "auto" or value == "-1" else _to_hint(flag, value)


def _to_chunk(flag: str, value: str) -> int:
    """SGLang's ``--chunked-prefill-size``: tokens, or -1 (or 0) for no chunked prefill."""
    number = _to_int(flag, value, low=-1)
    return -1 if number <= 0 else number


def _to_json(flag: str, value: str) -> dict[str, Any]:
    """vLLM's ``--speculative-config``: a JSON object; ``method`` and ``num_speculative_tokens`` are kept."""
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        raise _err(flag, f"expected a JSON object such as '{{\"method\": \"ngram\", \"num_speculative_tokens\": 3}}', "
                   f"got {_show(value)}") from None
    if not isinstance(doc, dict):
        raise _err(flag, f"expected a JSON object, got {_show(value)}")
    tokens = doc.get("num_speculative_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= 64):
        raise _err(flag, f"expected num_speculative_tokens from 0 to 64, got {tokens!r}")
    method = doc.get("method") or doc.get("model")
    return {"method": str(method)[:64] if method is not None else None, "num_speculative_tokens": tokens}


_READ: dict[str, Callable[[str, str], Any]] = {
    "int1": _to_int, "int0": lambda f, v: _to_int(f, v, 0), "hint": _to_hint, "len": _to_len, "frac": _to_frac,
    "gib": _to_gib, "word": _to_word, "chunk": _to_chunk, "json": _to_json,
}


def _looks_like_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _FLOAT.fullmatch(token)


def _split_lines(line: str) -> list[list[str]]:
    """The words of each physical line as a POSIX shell reads them (continuations joined, ``#`` comments)."""
    out = []
    for physical in physical_lines(line, SOURCE, MAX_LINE_CHARS):
        try:
            out.append(split_words(physical))
        except ValueError as exc:
            raise ScenarioError(SOURCE, "", f"expected balanced quotes ({exc})") from None
    return out


def _program(tokens: list[str]) -> tuple[str, str, int] | None:
    """(engine, program, index of the first word after it) if ``tokens`` name a server at some position."""
    for i, token in enumerate(tokens):
        base = re.split(r"[\\/]", token)[-1].lower()
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if base in ("vllm", "sglang") and following == "serve":
            return base, f"{base} serve", i + 2
        if _PYTHON.fullmatch(base) and following == "-m" and i + 2 < len(tokens):
            module = tokens[i + 2]
            if module in VLLM_MODULES or module in SGLANG_MODULES:
                return ("vllm" if module in VLLM_MODULES else "sglang"), f"python -m {module}", i + 3
    return None


def _command_tokens(line: str) -> tuple[str, str, list[str], list[str]]:
    """(engine, program, the words before it, the words after it) of the first line naming a server."""
    for tokens in _split_lines(line):
        found = _program(tokens)
        if found:
            engine, program, start = found
            before = tokens[:start - (2 if program.endswith(" serve") else 3)]
            return engine, program, before, tokens[start:]
    raise ScenarioError(SOURCE, "program", "expected vllm serve MODEL, python -m vllm.entrypoints.openai.api_server, "
                        "python -m sglang.launch_server or sglang serve")


def _name_of(token: str, table: dict[str, tuple[str, str]]) -> tuple[str, str | None]:
    """(flag name, value given after ``=``); ``--long_name`` reads as ``--long-name`` (argparse takes both in
    vLLM's FlexibleArgumentParser and SGLang's)."""
    name, eq, inline = token.partition("=")
    if name.startswith("--"):
        name = name.replace("_", "-")
    return (name, inline) if eq and (name.startswith("--") or name in table) else (name, None)


def _apply(args: deque[str], cmd: ServingCommand, key: str, kind: str, name: str, inline: str | None) -> None:
    """Read one recognised flag into ``cmd``."""
    if kind in ("on", "off", "bool"):
        value = kind != "off"
        if kind == "bool" and inline is None and args and args[0].lower() in _BOOL_WORDS:
            inline = args.popleft()  # vLLM's older StoreBoolean flags took a value: --enable-chunked-prefill False
        if inline is not None:
            if kind != "bool" or inline.lower() not in _BOOL_WORDS:
                raise _err(name, f"expected no value after {name}" + (" or true / false" * (kind == "bool"))
                           + f", got {_show(inline)}")
            value = _BOOL_WORDS[inline.lower()]
        cmd.settings[key], cmd.flags[key] = value, name
        return
    if inline is None and (not args or _looks_like_flag(args[0]) or args[0] in _SHELL_STOP):
        raise _err(name, f"expected a value after {name}")
    value = args.popleft() if inline is None else inline
    if kind == "model":
        cmd.model = value
        return
    if kind in _CHOICES:
        if value.lower() not in _CHOICES[kind]:
            raise _err(name, f"expected one of {', '.join(_CHOICES[kind])}, got {_show(value)}")
        cmd.settings[key] = value.lower()
    elif kind.startswith("spec_"):
        spec = dict(cmd.settings.get("speculative") or {})
        part = kind[5:]
        if part in ("tokens", "steps"):
            spec["num_speculative_tokens" if part == "tokens" else "num_steps"] = _to_int(name, value, 0)
        else:
            spec["method"] = _to_word(name, value) if part == "algo" else spec.get("method") or "draft_model"
            if part == "model":
                spec["model"] = value[:200]
        cmd.settings[key] = spec
    else:
        cmd.settings[key] = _READ[kind](name, value)
    cmd.flags[key] = name


def parse_command(line: str) -> ServingCommand:
    """The engine, model and settings of a pasted server command line (its first line that names vLLM or SGLang). A
    known flag missing its value or given a bad one raises :class:`ScenarioError` naming the flag."""
    engine, program, before, after = _command_tokens(line)
    cmd = ServingCommand(engine=engine, program=program)
    for token in before:
        if _ENV.match(token):
            name, _, value = token.partition("=")
            cmd.env[name] = value
        elif not token.endswith(("$", "#", ">", "%")) and token not in ("env", "exec", "nohup", "sudo"):
            cmd.unknown.append(token)  # a wrapper (taskset, numactl ...): kept, said
    table = _VLLM if engine == "vllm" else _SGLANG
    args = deque(after)
    if program.endswith(" serve") and args and not _looks_like_flag(args[0]) and args[0] not in _SHELL_STOP:
        cmd.model = args.popleft()  # vllm serve MODEL (SGLang's serve takes --model-path)
    while args:
        token = args.popleft()
        if shell_tail(args, token, cmd.ignored):
            continue
        if cmd.model is None and engine == "vllm" and program.endswith(" serve") and not _looks_like_flag(token):
            cmd.model = token  # argparse takes the positional MODEL after flags too
            continue
        name, inline = _name_of(token, table)
        if name in table:
            _apply(args, cmd, *table[name], name, inline)
            continue
        no_effect = name in _NO_EFFECT or bool(_NO_EFFECT_NAMES.fullmatch(name))
        if inline is None and args and _looks_like_flag(token) and not _looks_like_flag(args[0]) \
                and args[0] not in _SHELL_STOP:
            token = shlex.join([token, args.popleft()])  # its value: the next word that is no flag
        (cmd.ignored if no_effect else cmd.unknown).append(token)
    return cmd
