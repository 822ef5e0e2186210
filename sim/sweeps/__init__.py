"""Many runs: axes and sweep files, run keys, the runs of a plan, the store of finished runs, local pool and Dask
backends, and the result tables."""
