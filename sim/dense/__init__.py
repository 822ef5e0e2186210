"""A dense engine under continuous batching: the iteration roofline, the set-up with its KV pool, the batching loop
(chunked prefill, admission, preemption), and the kind's metrics and text."""
