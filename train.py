"""Trains a pNCNN-family model: `python train.py --config configs/kitti.py:pncnn --workdir DIR`.

The checkout's door to `pncnn-train` (pncnn_jax/training/train.py: its flags, --help and what it does).
"""

if __name__ == "__main__":
  # Huge pages first (pncnn_jax/runtime/hostmem.py, standard library only): the re-execution then costs an
  # interpreter start and not absl's and the configs' imports.
  from pncnn_jax.runtime import hostmem
  hostmem.reexec_with_hugepages()
  from pncnn_jax.training import train
  train.main()
