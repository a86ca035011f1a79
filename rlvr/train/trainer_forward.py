"""The trainer's forward pass: the log-probs (and entropy) a model gives the tokens of
completions after their prompts, at a sampling temperature, as the engine reports them.

Prompts are left-padded and completions right-padded so every completion starts at one column
(`collate`), or, with train.packing, every sequence is laid in one padding-free row
(rlvr.train.packing). Where the output layer is a plain linear map its forward is swapped, for
the call, for the chunked selective log-softmax of the real tokens (rlvr.grpo.
selective_logprobs, its weight gradient summed over the chunks in fp32: `head_logprobs`): no
[N, L, V] logits ever exist. Pure functions of a model and token ids:
rlvr.train.trainer.PolicyTrainer calls them with its own settings.
"""

from __future__ import annotations

import torch

from rlvr.grpo import selective_logprobs, token_logprobs


def collate(prompts: list[list[int]], comps: list[list[int]], pad_id: int):
    """Left-pad prompts and right-pad completions so every completion starts at column P."""
    P = max(len(p) for p in prompts)
    L = max(1, max(len(c) for c in comps))
    n = len(prompts)
    ids = torch.full((n, P + L), pad_id, dtype=torch.long)             # [N, P+L]
    attn = torch.zeros((n, P + L), dtype=torch.long)                    # [N, P+L]
    cmask = torch.zeros((n, L), dtype=torch.float32)                    # [N, L]
    targets = torch.full((n, L), pad_id, dtype=torch.long)              # [N, L]
    for i, (p, c) in enumerate(zip(prompts, comps)):
        ids[i, P - len(p):P] = torch.tensor(p)
        attn[i, P - len(p):P] = 1
        if c:
            ids[i, P:P + len(c)] = torch.tensor(c)
            attn[i, P:P + len(c)] = 1
            targets[i, :len(c)] = torch.tensor(c)
            cmask[i, :len(c)] = 1
    pos = (attn.cumsum(1) - 1).clamp(min=0)                             # [N, P+L]
    return ids, attn, pos, targets, cmask, L


def output_head(model, chunk_size: int):
    """The output layer when log-probs can be taken from its inputs chunk by chunk, else None
    (a chunk size of 0, or a model whose logits are not a plain linear map of its last hidden state)."""
    head = model.get_output_embeddings() if chunk_size else None
    cfg = getattr(model, "config", None)
    if not isinstance(head, torch.nn.Linear) or getattr(cfg, "final_logit_softcapping", None) \
            or getattr(cfg, "logit_scale", None) not in (None, 1, 1.0):
        return None
    return head


def head_logprobs(h: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, temperature: float,
                  chunk_size: int, with_entropy: bool = False):
    """rlvr.grpo.selective_logprobs of the output layer `head` on h [T, H] -> (logp [T(, K)], entropy or None).

    With more than one chunk, a bf16 (or fp16) output layer that takes gradients is handed over
    as an fp32 copy: each chunk still computes in h's dtype, but the chunks' weight gradients
    are summed in fp32 and cast to the parameter's dtype once (summed in bf16, every chunk's
    addition rounds, and a tied embedding of Qwen3's 151,936 rows collects hundreds of them).
    The copy costs 4 bytes per output-layer weight, and as much again for the running sum, in
    the backward pass."""
    w, b = head.weight, head.bias
    fn = _selective(head)
    if chunk_size and h.shape[0] > chunk_size and w.requires_grad and w.dtype in (torch.bfloat16, torch.float16):
        w = w.float()
        b = b.float() if b is not None else None
    return fn(h, w, targets, temperature, chunk_size, with_entropy, b)


def _selective(head):
    """The chunked selective log-softmax for this output layer: vocabulary-parallel where its
    weight is split over tensor-parallel ranks (rlvr.train.parallel)."""
    from rlvr.train.parallel import is_vocab_parallel, vocab_parallel_logprobs

    return vocab_parallel_logprobs if is_vocab_parallel(head.weight) else selective_logprobs


def logprobs(model, prompts, comps, *, pad_id: int, device: str, temperature: float, chunk_size: int,
             packing: bool = False, with_entropy: bool = False, extra_ids: torch.Tensor | None = None):
    """-> (logp [N, L], entropy [N, L] detached or None, mask [N, L]) of the completions at
    `temperature` (with_entropy "stats": [N, L, 2], the entropy with its graph and the top-1
    probability; rlvr.grpo.selective_logprobs), chunk_size completion tokens' full-vocabulary logits at once (0: all, the
    reference path). extra_ids [N, L, K]: also the log-probs of these ids at each position (a
    teacher's top-k), logp then [N, L, 1 + K] with the completion's own token first."""
    if packing:
        return logprobs_packed(model, prompts, comps, device=device, temperature=temperature,
                               chunk_size=chunk_size, with_entropy=with_entropy, extra_ids=extra_ids)
    ids, attn, pos, targets, cmask, L = collate(prompts, comps, pad_id)
    if extra_ids is not None:
        targets = torch.cat([targets.unsqueeze(-1), extra_ids[:, :L].to(targets.dtype).cpu()], -1)  # [N, L, 1+K]
    dev = device
    targets, cmask = targets.to(dev), cmask.to(dev)
    head = output_head(model, chunk_size)
    ents = []
    if head is not None:
        # The output layer's forward is swapped, for this call, for the chunked selective
        # log-softmax of the completion's real tokens: the model's forward (and FSDP's hooks
        # around it) runs as usual, and no [N, L, V] logits ever exist.
        sel = cmask.bool()                                                   # [N, L]

        def forward(h):                                                      # h [N, L+1, H]
            lp, ent = head_logprobs(h[:, :L][sel], head, targets[sel], temperature, chunk_size, with_entropy)
            ents.append(ent)
            return lp                                                        # [T] real tokens
        head.forward = forward
    try:
        # no autocast: the parameters are in the compute dtype (MasterWeights, FSDP's policy)
        out = model(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                    logits_to_keep=L + 1, use_cache=False)
    finally:
        if head is not None:
            del head.forward                                                 # back to nn.Linear.forward
    if head is not None:
        where = sel.unsqueeze(-1).expand_as(targets) if targets.dim() == 3 else sel
        logp = torch.zeros(targets.shape, dtype=cmask.dtype, device=dev).masked_scatter(where, out.logits)
        ent = scatter_stats(sel, ents[0], cmask) if with_entropy else None
        return logp, ent, cmask
    # The reference path (train.logprob_chunk_size 0): [N, L, V] logits, in fp32 before the
    # temperature (as vLLM).
    logits = out.logits[:, :L, :].float() / temperature
    del out
    logp, ent = token_logprobs(logits, targets, with_entropy=with_entropy)  # [N, L]
    return logp, ent, cmask


def logprobs_packed(model, prompts, comps, *, device: str, temperature: float, chunk_size: int,
                    with_entropy: bool = False, extra_ids: torch.Tensor | None = None):
    """`logprobs` on one padding-free row (train.packing, rlvr.train.packing): the same values
    in the same [N, L(, 1 + K)] layout; only real tokens are computed."""
    from rlvr.train.packing import forward_kwargs, pack, packed_attention

    p = pack(prompts, comps)
    dev = device
    cmask, targets = p.cmask.to(dev), p.targets.to(dev)
    sel = cmask.bool()                                                       # [N, L]
    if extra_ids is not None:   # the real tokens' rows, in the packed (row-major) order: [T_c, 1+K]
        targets = torch.cat([targets.unsqueeze(-1), extra_ids[:, :sel.shape[1]].to(dev, targets.dtype)[sel]], -1)
    head = output_head(model, chunk_size)
    ents = []
    if head is not None:
        def forward(h):                                                      # h [1, T_c, H]
            lp, ent = head_logprobs(h[0], head, targets, temperature, chunk_size, with_entropy)
            ents.append(ent)
            return lp                                                        # [T_c]
        head.forward = forward
    try:
        # no autocast: the parameters are in the compute dtype (MasterWeights, FSDP's policy)
        with packed_attention(model):
            out = model(**forward_kwargs(p, dev))
    finally:
        if head is not None:
            del head.forward
    if head is not None:
        lp, ent = out.logits, (ents[0] if with_entropy else None)
    else:
        lp, ent = token_logprobs(out.logits[0].float() / temperature, targets, with_entropy=with_entropy)
    where = sel.unsqueeze(-1).expand(*sel.shape, targets.shape[1]) if targets.dim() == 2 else sel
    logp = torch.zeros(where.shape, dtype=cmask.dtype, device=dev).masked_scatter(where, lp)   # [N, L(, 1+K)]
    return logp, (scatter_stats(sel, ent, cmask) if with_entropy else None), cmask


def scatter_stats(sel: torch.Tensor, values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The real tokens' entropy [T] (or entropy and top-1 probability, [T, 2]: with_entropy "stats")
    back into [N, L] (or [N, L, 2]), zeros elsewhere, keeping its graph."""
    if values.dim() == 2:
        out = like.new_zeros((*sel.shape, values.shape[-1]))
        return out.masked_scatter(sel.unsqueeze(-1).expand_as(out), values)
    return torch.zeros_like(like).masked_scatter(sel, values)
