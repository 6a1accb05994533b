"""The paper's claims reproduced on the synthetic benchmark: the research wing of pncnn_jax.

Nothing outside this folder imports it (tests/test_structure.py). `python -m pncnn_jax.experiments.reproduce`
trains the runs of `runs.RUNS`, evaluates them (`evaluate_runs`), judges the claims (`claims`) and writes the
results pages (`pages/`); `flow/` does the same for the sparse optical-flow extension; `demo` is `make demo`.
"""
