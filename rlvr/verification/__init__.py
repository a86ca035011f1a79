"""The verification engine: runs the verifiers (rlvr.verifiers, one module per verifier) over
records, turns verdicts into rewards and sums them up.

    pool      VerifierPool: killable worker processes, per-verification timeouts, records in order
    rewards   RewardTable: status (or instruction score) -> reward
    summary   Summary: accuracy per dataset, counts per status, timeouts (rlvr-verify --summary)

Used by rlvr-verify, rlvr-eval and the training loop.
"""
