"""The leave-one-source-out fidelity benchmark: every public table predicted by a fit that never saw its source.

Each kind of measurement (llama.cpp speeds and memory, load times, expert-cache statistics, serving under load) is a
:class:`~sim.fidelity.domain.Domain`: it turns its tables' rows into observations, fits its shared physical
parameters to a set of observations, and predicts others. :mod:`sim.fidelity.loso` refits each domain once per held
out group (a source, with every other source measured on the same machine) and predicts that group's rows;
:mod:`sim.fidelity.report` writes the figures per table, engine and backend (``docs/fidelity.md``).
"""
