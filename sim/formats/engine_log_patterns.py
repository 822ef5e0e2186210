"""The patterns of the engine log lines :mod:`sim.formats.engine_logs` reads. Every pattern starts with literal text and
has no nested or unbounded-then-alternative quantifiers, so a search is linear in the length of a line."""

from __future__ import annotations

import re

NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"

BASALT_DONE = re.compile(
    rf"\bs(?P<slot>\d+)\s+done\s+pp\s*=\s*(?P<prompt>\d+)\s*/\s*(?P<cached>\d+)\s*c\s+(?P<prefill_s>{NUM})\s*s"
    rf"(?:\s+(?P<prefill_rate>{NUM})\s*t/s)?\s+tg\s*=\s*(?P<out>\d+)\s+(?P<decode_rate>{NUM})\s*t/s"
    rf"(?:\s+acc\s*=\s*(?P<acc>{NUM})\s*%)?\s+ttft\s*=\s*(?P<ttft>{NUM})\s*s\s+end\s*=\s*(?P<end>\w+)"
    rf"(?:\s+hit\s*=\s*(?P<hit>{NUM})\s*%)?(?:\s+pcie\s*=\s*(?P<pcie>{NUM})\s*%)?")
BASALT_READ = re.compile(r"\bs\d+\s+read\b")
BASALT_LOADED = re.compile(
    rf"\bloaded\s+(?P<gib>{NUM})\s*GiB\s+(?P<s>{NUM})\s*s(?P<rest>(?:\s+[\w-]+=\s*{NUM}\s*GiB)+)")
BASALT_AUTO = re.compile(rf"\bauto\s+resident\s*=\s*(?P<gb>{NUM})\s*GB\s+pool\s*=\s*(?P<pool>\d+)")
STRATA_PROMPT = re.compile(
    rf"strata serve:\s+prompt\s+(?P<prompt>\d+)\s+tokens\s*=\s*(?P<reused>\d+)\s+reused\s*\+\s*(?P<read>\d+)\s+read"
    rf"\s+in\s+(?P<prefill_ms>{NUM})\s*ms,\s*(?P<out>\d+)\s+generated\s+in\s+(?P<decode_ms>{NUM})\s*ms"
    rf"\s*\(\s*(?P<rate>{NUM})\s*tok/s\s*\)(?:,\s*drafts accepted\s*(?P<acc>{NUM})?\s*%?)?")
STRATA_HIT = re.compile(
    rf"strata serve:\s+decode expert cache hit rate:\s*(?P<hit>{NUM})\s*%\s*\(\s*(?P<hits>\d+)\s+hits\s*/\s*"
    rf"(?P<lookups>\d+)\s+lookups\s*\)(?:;\s*(?P<more>\d+)\s+more read[^(]*\(\s*(?P<pcie>{NUM})\s*%\s+of all\s+"
    rf"(?P<routed>\d+)\s+routed\s*\))?")
STRATA_START = re.compile(r"strata (?:generate|serve):\s+(?:PCIe probe|expert cache auto|profile|pre-filled)")
STRATA_SLOTS = re.compile(rf"expert cache auto:\s*(?P<free>{NUM})\s*GiB free,\s*(?P<reserve>{NUM})\s*MiB reserved"
                          rf"(?:\s*\(\+(?P<head>{NUM})\s*MiB[^)]*\))?\s*->\s*(?P<slots>\d+)\s+slots")
STRATA_PROBE = re.compile(rf"PCIe probe:\s*(?P<gbps>{NUM})\s*GB/s")
LNUM = r"\d+(?:[.,]\d+)?|[-+]?nan|inf"  # llama.cpp prints %.2f, with a decimal comma in some locales
LLAMA_PROMPT = re.compile(
    rf"(?:prompt\s+eval|peval) time\s*=\s*(?P<ms>{LNUM})\s*ms\s*/\s*(?P<n>\d+)\s*(?:tokens|runs)"
    rf"(?:\s*\(\s*(?P<per>{LNUM})\s*ms per (?:token|run),?\s*(?:(?P<rate>{LNUM})\s*tokens per second)?\s*\))?")
LLAMA_EVAL = re.compile(
    rf"(?<![\w])(?:generation )?eval time\s*=\s*(?P<ms>{LNUM})\s*ms\s*/\s*(?P<n>\d+)\s*(?:tokens|runs)"
    rf"(?:\s*\(\s*(?P<per>{LNUM})\s*ms per (?:token|run),?\s*(?:(?P<rate>{LNUM})\s*tokens per second)?\s*\))?")
LLAMA_TOTAL = re.compile(rf"total time\s*=\s*(?P<ms>{LNUM})\s*ms(?:\s*/\s*(?P<n>\d+)\s*tokens)?")
LLAMA_OTHER = re.compile(r"(?:load|sample|sampling|samplers|unaccounted) time\s*=|graphs reused\s*=")
LLAMA_SLOT = re.compile(r"\bslot\s+print_timings?\s*:\s*id\s+\d+\s*\|\s*task\s+-?\d+\s*\|\s*$")
LLAMA_CHATTER = re.compile(r"^(?:slot|srv)\s+[\w ]{1,14}:\s|^INFO\s*\[\s*[\w ]+\]")
LLAMA_DRAFT = re.compile(rf"draft acceptance(?: rate)?\s*=\s*(?P<rate>{LNUM})")
LINE_PREFIX = re.compile(r"^(?:\[\d+\]\s*)?(?:\d+\.\d{2}\.\d{3}\.\d{3}\s+[IWED]\s+)?")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
VLLM_STATS = re.compile(r"Avg prompt throughput:")
VLLM_FIELDS = {
    "prompt_throughput_tok_s": re.compile(rf"Avg prompt throughput:\s*(?P<v>{NUM})\s*tokens/s"),
    "generation_throughput_tok_s": re.compile(rf"Avg generation throughput:\s*(?P<v>{NUM})\s*tokens/s"),
    "running": re.compile(r"Running:\s*(?P<v>\d+)\s*reqs"),
    "waiting": re.compile(r"(?:Waiting|Pending):\s*(?P<v>\d+)\s*reqs"),
    "kv_usage": re.compile(rf"GPU KV cache usage:\s*(?P<v>{NUM})\s*%"),
    "prefix_hit_rate": re.compile(rf"(?<!External )(?<!MM )Prefix cache hit rate:\s*(?:GPU:\s*)?(?P<v>{NUM})\s*%"),
}
VLLM_PREFIX_LINE = re.compile(rf"Prefix cache hit rate:\s*GPU:\s*(?P<v>{NUM})\s*%")
VLLM_SPEC = re.compile(r"(?:Speculative metrics|SpecDecoding metrics):")  # then VLLM_SPEC_RATE after it
VLLM_SPEC_RATE = re.compile(rf"Draft acceptance rate:\s*(?P<v>{NUM}|nan)(?P<pct>\s*%)?")
LOADED_PART = re.compile(rf"([\w-]+)=\s*({NUM})\s*GiB")
LLAMA_IDS = re.compile(r"\b(?:id_slot|id_task|id|task|slot)\s*[=:]?\s*(\d+)")
VLLM_PERCENT = ("kv_usage", "prefix_hit_rate")
# vLLM's start-up phases, as its source prints them (docs/research/loaders.md 4; sim.lab.startup.VLLM_PHASES):
# "Loading weights took %.2f seconds", "Model loading took %.4f GiB and %.6f seconds" (newer: "%s GiB memory and"),
# "Dynamo bytecode transform time: %.2f s", "Compiling a graph for ... takes %.2f s", "Directly load the compiled
# graph(s) for ... from the cache, took %.3f s", "torch.compile takes %.2f s in total" (newer: "took"), "Graph
# capturing finished in %.0f secs, took %.2f GiB", "init engine (profile, create kv cache, warmup model) took %.2f
# seconds" (newer: "... took %.2f s (compilation: %.2f s)")
VLLM_PHASE_LINES = {
    "loading_weights_s": re.compile(rf"Loading weights took\s+(?P<s>{NUM})\s*seconds"),
    "model_loading_s": re.compile(rf"Model loading took\s+(?P<gib>{NUM})\s*GiB(?:\s+memory)?\s+and\s+"
                                  rf"(?P<s>{NUM})\s*(?:seconds|s)\b"),
    "dynamo_s": re.compile(rf"Dynamo bytecode transform time:\s*(?P<s>{NUM})\s*s\b"),
    "torch_compile_s": re.compile(rf"torch\.compile (?:takes|took)\s+(?P<s>{NUM})\s*s in total"),
    "graph_capturing_s": re.compile(rf"Graph capturing finished in\s+(?P<s>{NUM})\s*secs?"
                                    rf"(?:,\s*took\s+(?P<gib>{NUM})\s*GiB)?"),
    "init_engine_s": re.compile(rf"init engine (?:\(profile, create kv cache, warmup model\) )?took\s+(?P<s>{NUM})\s*"
                                rf"(?:seconds|s)\b(?:\s*\(compilation:\s*(?P<compile>{NUM})\s*s\))?"),
}
# two-step phases: the line's literal start, then its seconds after it (no unbounded gap inside one pattern)
VLLM_PHASE_STARTS = {
    "compile_graph_s": (re.compile(r"Compiling a graph for "), re.compile(rf"\btakes\s+(?P<s>{NUM})\s*s\b")),
    "cached_graph_s": (re.compile(r"Directly load the compiled graph\(s\) for "),
                       re.compile(rf"\btook\s+(?P<s>{NUM})\s*s\b")),
}
