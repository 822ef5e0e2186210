"""Any engine under load, whatever its kind: request workloads, the queue (arrivals, admission, FIFO, processor
sharing), the per-request telemetry schema and its columns, the server's metrics and text, and the interface every
engine kind implements (:mod:`sim.serving.engine`)."""
