"""An MoE engine serving from an expert cache: routing laws, caches and their tiers, the law of the distinct experts a
step touches, step costs, prefill, the engine's set-up, decode (vectorised, and by every lookup), continuous
batching, and the kind's metrics and text."""
