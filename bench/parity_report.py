"""Measures our outputs against the official implementation's golden files and writes docs/PARITY.md.

  python bench/parity_report.py --shared ../shared --output docs/PARITY.md

For every model and case in ../shared/reference/golden: the max absolute prediction error (m) and the max
relative error of the two confidence channels; where the reference also ran in float64, our float32 error and the
reference's own float32 error against that float64 run. The tests (tests/nn/test_models_parity.py) assert the
tolerances; this script records the measured figures.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import platform
import sys

import jax
import jax.numpy as jnp
import numpy as np

from pncnn_jax.checkpoints import convert
from pncnn_jax.nn import models

MODELS = {
    "kitti_ncnn_conf_l1": "ncnn_conf_l1", "kitti_ncnn_conf_l2": "ncnn_conf_l2", "nyu_ncnn_conf_l1": "ncnn_conf_l1",
    "kitti_pncnn_rand0": "pncnn", "kitti_pncnn_exp_rand1": "pncnn_exp",
}


def _nhwc(a):
  return np.transpose(a, (0, 2, 3, 1))


def _rel(got, ref):
  return float(np.max(np.abs(got - ref) / (np.abs(ref) + 1e-6)))


def measure(shared: pathlib.Path) -> list[dict]:
  rows = []
  golden_dir = shared / "reference" / "golden"
  for name, variant in MODELS.items():
    with np.load(shared / "reference" / "weights" / f"{name}.npz") as f:
      variables, _ = convert.state_dict_to_variables({k: f[k] for k in f.files})
    model = models.build_model(variant)
    fwd = jax.jit(lambda v, x, model=model: model.apply(v, x, train=False))
    for path in sorted((golden_dir / name).glob("*.npz")):
      with np.load(path) as g:
        golden = {k: g[k] for k in ("input", "out", "out_f64") if k in g.files}
      out = fwd(variables, jnp.asarray(_nhwc(golden["input"])))
      ours = _nhwc(np.asarray(out.stack_nchw(), np.float64))
      ref = _nhwc(golden["out"].astype(np.float64))
      row = {"model": name, "case": path.stem, "shape": "x".join(map(str, ref.shape[1:3])),
             "pred_max_abs_m": float(np.abs(ours[..., 0] - ref[..., 0]).max()),
             "conf_max_rel": _rel(ours[..., 1], ref[..., 1]), "c0_max_rel": _rel(ours[..., 2], ref[..., 2])}
      if "out_f64" in golden:
        f64 = _nhwc(golden["out_f64"])
        row["ours_vs_f64"] = np.abs(ours - f64).max(axis=(0, 1, 2)).tolist()
        row["ref_vs_f64"] = np.abs(ref - f64).max(axis=(0, 1, 2)).tolist()
      rows.append(row)
  return rows


def render(rows: list[dict]) -> str:
  lines = [
      "# Parity with the official implementation",
      "",
      f"Written by `python bench/parity_report.py` on {datetime.date.today().isoformat()} "
      f"(jax {jax.__version__}, {jax.default_backend()}, Python {platform.python_version()}). Golden files: "
      "../shared/reference/golden (official PyTorch code with the official checkpoints; pNCNN/pNCNN-Exp with seeded "
      "random weights). Tolerances asserted by the tests: prediction 5e-3 m absolute; confidences 1e-3 relative + "
      "1e-6 absolute. Relative errors below are |ours - ref| / (|ref| + 1e-6).",
      "",
      "| model | case | H x W | prediction max abs err (m) | confidence max rel err | c0 max rel err |",
      "|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(f"| {r['model']} | {r['case']} | {r['shape']} | {r['pred_max_abs_m']:.2e} | "
                 f"{r['conf_max_rel']:.2e} | {r['c0_max_rel']:.2e} |")
  lines += ["", "## Float32 rounding against the reference's float64 run", "",
            "Max absolute difference to the official float64 run, per channel (prediction m / confidence / c0).", "",
            "| model | case | ours (float32) | official (float32) |", "|---|---|---|---|"]
  for r in rows:
    if "ours_vs_f64" in r:
      fmt = lambda v: " / ".join(f"{x:.1e}" for x in v)  # noqa: E731
      lines.append(f"| {r['model']} | {r['case']} | {fmt(r['ours_vs_f64'])} | {fmt(r['ref_vs_f64'])} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shared", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2] / "shared")
  parser.add_argument("--output", type=pathlib.Path, default=None)
  args = parser.parse_args(argv)
  text = render(measure(args.shared))
  print(text)
  if args.output:
    args.output.write_text(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
