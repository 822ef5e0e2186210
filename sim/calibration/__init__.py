"""Fitting to measurements and checking against them: engine logs, measured tables as targets, replayed requests,
the staged fit, its standard errors and the files it writes, ``sim validate``, parameter draws for ``--uncertainty``,
and the load-stage fit."""
