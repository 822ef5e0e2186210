"""Scenario files: the schema section by section (base, machines, engine, models, serve, calibrate, scenario), the
cross-reference checks, YAML reading, dotted key paths, loading with calibration overlays and ``--set``, the input
files a scenario names, its PCIe links resolved, and plausibility warnings on values that validate."""
