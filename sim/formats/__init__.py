"""Readers of outside formats: every file the package reads that it did not write itself, turned into typed
observations.

- :mod:`~sim.formats.inputs`: the one input layer every reader opens files through (a regular file, its size, UTF-8
  text, JSON); :mod:`~sim.formats.quantities`: the range each kind of number read can take.
- :mod:`~sim.formats.engine_logs` (with ``engine_logs_io``, ``engine_log_patterns``, ``engine_log_values``): engine
  logs (vLLM, SGLang, llama.cpp, ...) as request rows and start-up facts.
- :mod:`~sim.formats.llama_bench` (with ``bench_ranges`` and ``bench_files``) and :mod:`~sim.formats.batched_bench`:
  llama-bench, llama-sweep-bench and llama-batched-bench outputs.
- :mod:`~sim.formats.route_trace`: which experts each token chose (CSV or JSONL), as a ``RouteTrace``.
- :mod:`~sim.formats.gguf` and :mod:`~sim.formats.hf_config`: what a GGUF header and a config.json hold
  (:mod:`sim.modelfiles` turns it into a model's geometry).
- :mod:`~sim.formats.measured_tables`, :mod:`~sim.formats.public_tables` and :mod:`~sim.formats.request_traces`:
  measured CSV tables, the public tables of ``calibration/public/``, request traces and lengths tables;
  :mod:`~sim.formats.operator_profiles`: operator times profiled on real cards (Vidur's tables).
- Typed records of the measured tables calibration fits: :mod:`~sim.formats.routing_stats` (routing statistics),
  :mod:`~sim.formats.load_times` (load times and load rates), :mod:`~sim.formats.request_tables` (completed
  requests), :mod:`~sim.formats.llama_bench_tables` (the public llama-bench tables) and
  :mod:`~sim.formats.measured_cells` (the cells, quantities and buckets tables a scenario maps).
- Typed records of the public tables the fidelity benchmark predicts: :mod:`~sim.formats.public_routing` (the
  expert-cache table), :mod:`~sim.formats.public_loads` (the weight-loading tables) and
  :mod:`~sim.formats.public_serving` (the serving sweeps).

This package imports only :mod:`sim.core`, and no engine imports it (``tests/test_architecture.py``): a file is read
by the layer that resolves a scenario or by a command, and an engine is handed what was read.
"""
