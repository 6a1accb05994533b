"""The training recipes: one `get_config(arg) -> ml_collections.ConfigDict` per file, read by `--config`.

  base                the fields every config shares, one commented field per line, with the published values
  kitti, nyu          KITTI depth completion and NYU-Depth-v2, the published recipes (need the built datasets)
  synthetic           the synthetic LiDAR street scenes, sized for a CPU (no download)
  ensemble_synthetic  K members of one variant trained together, then every fusion rule
  flow_synthetic      sparse optical flow (the `pncnn_jax.flow` extension's variants)

They ship in the package, so `pncnn-train --config kitti:pncnn` works from any directory once pncnn_jax is
installed; a checkout's `configs/<name>.py` is a one-line door to the file here, so `python train.py --config
configs/kitti.py:pncnn` and `pncnn_jax.load_config("configs/kitti.py:pncnn")` read the same recipe
(`pncnn_jax.runtime.cli.config_path` says how a `--config` value is found). A config of your own is any file with
a `get_config`; it may start from these: `from pncnn_jax.configs import synthetic; c = synthetic.get_config("pncnn")`.
Nothing in the package imports this folder except the research wing (`pncnn_jax.experiments`), which trains them.
"""
