"""How many operations (ggml graph nodes that launch work) each part of a block adds to llama.cpp's compute graph.

A backend pays a fixed cost per node it runs (a kernel launch, a dispatch into a command buffer, a barrier of the
CPU's threads): ``node_s.BACKEND`` per node (:mod:`sim.llamacpp.params`). Views and reshapes are graph nodes too but
launch nothing; they are not counted. The counts follow llama.cpp's graph builders (llm_build_* in src/models):

- attention (GQA): the input norm and its weight (2), Q, K, V projections (3), their biases where present, Q and K
  norms where present (qk_norm: 4), rope on Q and K (2), writing K and V into the cache (2), the attention itself
  (flash attention: 1 node; without: the scores product, the soft-max and the value product, with their permute and
  copy: 5), the output projection and the residual add (2);
- MLA: the query's low-rank pair with its norm (4), the KV latent projection, its norm and the rope split (5), two
  ropes, the cache write, the absorbed products (3), the attention as above, output and residual (2);
- Gated DeltaNet: input projections (2), the causal convolution and its activation (2), the q/k l2 norms (2), the
  gates (6), the chunked delta rule (llama.cpp builds it from primitive ops: about 20), the gated output norm (3),
  output projection and residual (2);
- dense FFN: norm (2), gate and up (2), the GLU (1), down (1), residual (1);
- routed experts: norm (2), router logits (1), soft-max or sigmoid (1), top-k (2), the weights' gather and
  normalisation (3), gate/up/down over the selected experts (3), the GLU (1), the weighting (1), and ``top_k - 1``
  adds summing the experts' outputs; a shared expert adds gate/up/down, the GLU and its add (5);
- the output head: the final norm (2) and the projection (1).

Counted as llama.cpp counts ``graph nodes`` (views and reshapes included, which launch nothing but are walked), the
per-part numbers are set so a model's total matches the counts mainline logs print: Llama-3.1-8B 999 nodes over 32
blocks (31 per block: attention 22 + FFN 9), Qwen3-30B-A3B 3126 over 48 (65 per block: attention with Q/K norms
26 + routed experts 39 at top-8) (calibration/checks/llamacpp_logs.csv LCL039, LCL010;
docs/research/llamacpp_internals.md section 5). The other kinds are scaled from their builders' structure.
"""

from __future__ import annotations

from sim.modelfiles.geometry import ModelGeometry

ATTENTION_NODES = {"full": 22, "sliding": 22, "mla": 32, "linear": 58}
NO_FLASH_EXTRA = 4  # without flash attention: the scores' product, soft-max and value product instead of one node
FFN_NODES = 9
EXPERT_NODES = 32  # plus top_k - 1 adds
SHARED_EXPERT_NODES = 9
OUTPUT_NODES = 5


def attention_nodes(kind: str, flash: bool, qk_norm: bool = False) -> int:
    """Nodes of one block's mixer."""
    n = ATTENTION_NODES[kind] + (4 if qk_norm else 0)
    if kind != "linear" and not flash:
        n += NO_FLASH_EXTRA
    return n


def ffn_nodes(g: ModelGeometry, moe_block: bool) -> tuple[int, int]:
    """(nodes of the FFN part outside the routed experts, nodes of the routed experts) of one block."""
    if not moe_block:
        return FFN_NODES, 0
    shared = SHARED_EXPERT_NODES if g.shared_experts else 0
    return shared, EXPERT_NODES + max(g.top_k - 1, 0)
