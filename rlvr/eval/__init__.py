"""rlvr-eval's library beyond one evaluation: sweeps of checkpoints x tasks over the GPUs of
a node (rlvr.eval.jobs: --jobs, --watch, --gpu-mode) and results tables over rlvr summaries
and lm-eval result files, with differences to a baseline (rlvr.eval.table: --table)."""
