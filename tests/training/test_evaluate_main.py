"""eval.py's program (pncnn_jax/training/evaluate_main.py, also `pncnn-eval`): importing it loads no jax (its
--help is instant and the hugepage re-execution comes first), and its --help lists its flags."""

import subprocess
import sys

from conftest import REPO


def test_importing_the_program_loads_no_jax_and_help_lists_its_flags():
  code = ("import sys\nfrom pncnn_jax.training import evaluate_main\n"
          "assert not [m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'flax', 'pncnn_jax.evaluate.'))]"
          ", sorted(sys.modules)\nprint('ok')")
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                     env={"PATH": "", "PYTHONPATH": str(REPO)})
  assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
  r = subprocess.run([sys.executable, "eval.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120,
                     env={"PATH": "", "PYTHONPATH": str(REPO), "PNCNN_NO_HUGEPAGES": "1"})
  for flag in ("--config", "--workdir", "--checkpoint", "--output", "--[no]overwrite", "--pairs_dir",
               "--[no]allow_mismatch", "--[no]allow_fallback", "--progress", "--sensors", "--reference_sensor"):
    assert f"  {flag}:" in r.stdout, flag
  assert "Also installed as `pncnn-eval`" in r.stdout and "configs/ensemble_synthetic.py" in r.stdout
