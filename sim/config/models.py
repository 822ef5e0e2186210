"""Scenario schema of a model: weights, MoE geometry with its routing law and drafts, dense geometry."""

from __future__ import annotations

from pydantic import Field, model_validator

from sim.config.base import MAX_KIB, MAX_MIB, MAX_TENSORS, MIN_KIB, Strict, input_file

MAX_WEIGHTS_GIB = 65536  # weights of a model (GiB)


class Routing(Strict):
    """Expert popularity of the served workload (see sim.moe.routing)."""

    exponent: float = Field(1.0, ge=0, le=5, description="Zipf exponent of expert popularity per layer (0: uniform).")
    exponent_depth_slope: float = Field(
        0.0, ge=-5, le=5, description="Change of the Zipf exponent from the first MoE layer to the last: a layer at "
        "relative depth d (0 first, 1 last) has exponent + slope * (d - 1/2), at least 0 (0: every layer alike).")
    locality: float = Field(
        0.0, ge=0, lt=1, description="Reuse between consecutive tokens (fraction): each position of the router's "
        "draw stream carries over to the next token with this probability, so about this share of a token's experts "
        "in a layer repeat the previous token's beyond what popularity alone gives (consecutive overlap "
        "|E(t) & E(t+1)| / top_k = sum(pi - (1 - pi) (1 - (1 - pi)^(1 - locality))) / top_k).")
    trace: str | None = input_file(
        "A route trace (relative to the scenario file; sim.formats.route_trace: CSV request,token,layer,experts or "
        "JSONL): the served popularity per layer becomes its smoothed frequencies and locality its consecutive "
        "overlap's reuse (exponent, exponent_depth_slope and locality are then not used).")
    drift_weight: float = Field(0.0, ge=0, le=1, description="Share of a request's lookups on its own hot set.")
    drift_hot_experts: int = Field(0, ge=0, description="Experts per layer in a request's own hot set.")
    drift_concentration: float = Field(
        0.0, ge=0, description="0: every request has drift_weight; >0: each draws it from a Beta law of that mean and "
        "this concentration (lower: requests differ more).")
    exponent_spread: float = Field(
        0.0, ge=0, le=2, description="Log-sd of a request's own skew: it routes by popularity ** exp(spread * z), "
        "renormalised (under Zipf: its own exponent).")
    popularity_seed: int = Field(0, ge=0, description="Which permutation of expert ids per layer the workload uses.")


class Draft(Strict):
    tokens: int = Field(0, ge=0, le=16, description="Draft tokens proposed per verification step (0: no drafting).")
    acceptance: float = Field(0.0, ge=0, lt=1, description="Probability each draft token is accepted (fraction).")
    head_mib: float = Field(0.0, ge=0, le=MAX_MIB, description="VRAM the draft head reserves (MiB).")


STATE_DOC = ("Per-sequence state of the model's linear-attention (Gated DeltaNet) layers, all of them (KiB): an "
             "engine keeps one per running sequence beside the per-token KV, and a decode step reads and writes it. "
             "From the model file at f32, as llama.cpp keeps it (0: none).")


class Moe(Strict):
    layers: int = Field(gt=0, description="MoE layers.")
    experts_per_layer: int = Field(gt=0, description="Routed experts per layer.")
    top_k: int = Field(gt=0, description="Experts routed per token per layer.")
    expert_mib: float = Field(ge=1e-6, le=MAX_WEIGHTS_GIB * 1024,
        description="Bytes of one expert, i.e. one cache slot (MiB).")
    dense_gib: float | None = Field(
        None, ge=0, le=MAX_WEIGHTS_GIB,
        description="Weights outside the routed experts: attention, shared experts, embeddings (GiB).")
    kv_kib_per_token: float | None = Field(None, ge=0, le=MAX_KIB, description="KV cache per token of context (KiB).")
    state_kib_per_sequence: float = Field(0.0, ge=0, le=MAX_KIB * 1e6, description=STATE_DOC)
    hidden: int | None = Field(
        None, gt=0, le=1_000_000, description="Model width: attention costs 4 x layers x hidden FLOPs per pair of a "
        "position and a context token (continuous batching's prefill attention). Default: not counted.")
    bits_per_weight: float | None = Field(
        None, ge=1, le=32, description="Bits per weight of the routed experts (from the model file's tensor types): "
        "turns expert_mib into parameters for the arithmetic a step does; also the dense weights' when "
        "dense_params_b is not given. Default: 4.5 (Q4_K), assumed.")
    dense_params_b: float | None = Field(
        None, gt=0, le=100_000, description="Parameters outside the routed experts (billions; from the model file's "
        "tensors): 2 FLOPs each per position of a step. Default: dense_gib converted at bits_per_weight.")
    routing: Routing = Routing()
    draft: Draft = Draft()

    @model_validator(mode="after")
    def _k_fits(self) -> Moe:
        if self.top_k > self.experts_per_layer:
            raise ValueError("top_k cannot exceed experts_per_layer")
        if self.routing.drift_hot_experts > self.experts_per_layer:
            raise ValueError("routing.drift_hot_experts cannot exceed experts_per_layer")
        return self


class Dense(Strict):
    """Geometry of a dense transformer (from its published configuration): what an iteration reads and computes."""

    params_b: float = Field(gt=0, le=100_000, description="Parameters (billions): 2 FLOPs each per token.")
    layers: int = Field(gt=0, description="Transformer layers.")
    hidden: int = Field(gt=0, description="Model width: attention costs 4 x layers x hidden FLOPs per token per "
                        "token of context.")
    kv_kib_per_token: float = Field(ge=MIN_KIB, le=MAX_KIB,
        description="KV cache per token of context, all layers (KiB).")
    state_kib_per_sequence: float = Field(0.0, ge=0, le=MAX_KIB * 1e6, description=STATE_DOC)


class ModelSpec(Strict):
    file: str | None = input_file("A Hugging Face config.json or a GGUF file (relative to the scenario) the "
                                  "geometry below is read from; values written here win.")
    quant: str | None = Field(None, description="Quantization of a config.json model (Q4_K_M, Q8_0, BF16, MXFP4, ...); "
                              "a GGUF file's tensors carry their own types (quant is then an error).")
    weights_gib: float = Field(gt=0, le=MAX_WEIGHTS_GIB, description="Bytes of weights to load (GiB).")
    tensors: int = Field(0, ge=0, le=MAX_TENSORS, description="Tensors in the weight files (loader per-tensor cost).")
    moe: Moe | None = Field(None, description="Mixture-of-experts geometry, when the model has routed experts.")
    dense: Dense | None = Field(None, description="Dense geometry, for serving it with a continuous-batching engine.")
