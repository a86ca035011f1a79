"""Upstream code copied into rlvr, kept as close to its source as possible (see NOTICE here).

Each file keeps its upstream copyright and licence header, lists its changes in its
docstring and marks them in the code; nothing else in rlvr lives here:

    ifeval.py, util.py   Google's IFEval checkers and their text utilities
    ifevalg.py           open-instruct's IFEvalG registry (IFEval's 25 plus 29 more)
    ifbench.py           AllenAI's IFBench out-of-distribution constraints
    nltk_port.py         the parts of NLTK 3.10.4 the checkers call (Punkt, tokenizer, tagger)

rlvr's own instruction-following code (the evaluator, strict and loose scoring, and the
deterministic text resources the checkers call) is ``rlvr.verifiers.if_checks``; the
verifiers that records name are ``rlvr.verifiers.ifeval`` and ``rlvr.verifiers.ifbench``.
"""
