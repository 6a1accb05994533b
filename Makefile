# The two set-up commands: `make test` and `make demo`. Both create .venv first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Prefer Python 3.12 (jax >= 0.11 needs it); fall back to 3.11.
PYTHON ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3 python3.11 python3; do \
	if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then echo $$p; break; fi; done)
PYTEST_ARGS ?=

.PHONY: venv lint docs test demo bench clean onnx

# The extras a new .venv gets; `make onnx` adds its own, so that a fresh venv is one pip run (5 s less than two).
VENV_EXTRAS ?= test,docs

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no Python >= 3.11 found (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(VENV_EXTRAS)]'
	echo '$(VENV_EXTRAS)' > $@

venv: $(VENV)/.installed

# The ONNX route of `python -m pncnn_jax.export` (docs/deploy/export.md): the `onnx` extra, then jax2onnx without
# its dependencies (it pins an orbax-checkpoint older than ours, which its converter does not use; pyproject.toml).
onnx: VENV_EXTRAS = test,docs,onnx
onnx: venv
	grep -q onnx $(VENV)/.installed || $(PY) -m pip install -q -e '.[onnx]'
	$(PY) -m pip install -q --no-deps jax2onnx==0.17.1
	$(PY) -c 'from pncnn_jax.inference import export; export._jax2onnx(); import onnxruntime; print("ONNX route installed")'

# pyflakes and pycodestyle errors, lines <= 120 characters (pyproject.toml [tool.ruff]); under a second.
lint: venv
	$(PY) -m ruff check .

# The documentation site (mkdocs.yml), strict: every link, anchor and page resolves; into build/site (git-ignored).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/site

test: venv lint docs
	$(PY) -m pytest -q -n 2 --dist loadgroup $(PYTEST_ARGS)

demo: venv
	$(PY) -m pncnn_jax.demo --workdir demo_out

bench: venv
	$(PY) bench/bench_forward.py --output docs/develop/benchmarks-log.md $(if $(TORCH_PYTHON),--torch_python $(TORCH_PYTHON))

clean:
	rm -rf $(VENV) demo_out build *.egg-info
