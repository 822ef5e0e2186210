"""The first simulator: a lab of machines that load models and take jobs. What a machine offers a load (memory
targets, stage costs), the page cache, the load-stage mechanism and its simpy pipeline, tensor-parallel ranks
sharing a host, checkpoints' tensor counts, start-up phases, load probes, residency,
dispatch estimates and the tie rule, the jobs simulation, and the break-even between two machines."""
