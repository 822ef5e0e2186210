"""The first simulator: a lab of machines that load models and take jobs. What a machine offers a load (memory
targets, stage costs), the page cache, the load-stage mechanism and its simpy pipeline, load probes, residency,
dispatch estimates and the tie rule, the jobs simulation, and the break-even between two machines."""
