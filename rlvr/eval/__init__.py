"""rlvr-eval's library, one module per concern.

    rlvr.eval.runner   canonical checkpoint evaluation (evaluate_checkpoint), the watch loop,
                       results tables of the summaries
    rlvr.eval.tasks    lm-evaluation-harness's standard tasks (gsm8k, gsm8k_cot, minerva_math,
                       hendrycks_math, mbpp, humaneval, ifeval) built offline from local files
                       through lm-eval as a library: its prompts, stop sequences and scores;
                       plus math_qwen, ifbench and if_multi
    rlvr.eval.harness  `rlvr-eval --harness lm-eval`: lm-eval's own vLLM backend under the
                       standard template (TP 1, seed 42, greedy, bfloat16)
"""
