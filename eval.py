r"""Evaluates a checkpoint: `python eval.py --config configs/kitti.py:pncnn --workdir DIR --checkpoint best`.

The flags and the program are `pncnn_jax.training.evaluate_main` (also installed as `pncnn-eval`); `--help` lists
them. Every config (a depth model, an ensemble, a flow model) goes through one entry,
`pncnn_jax.evaluate.checkpoint.evaluate_checkpoint`.
"""

if __name__ == "__main__":
  from pncnn_jax.training import evaluate_main

  evaluate_main.main()
