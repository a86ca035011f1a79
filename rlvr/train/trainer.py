"""The policy side of rlvr-train: model, optimizer, GRPO step, weights out, checkpoints.

PolicyTrainer knows nothing of Ray or vLLM; rlvr.train.actors wraps it in a Ray actor.
One `step(batch)` is one optimizer step over a batch of (prompt ids, completion ids,
advantage, engine log-probs) sequences, with gradient accumulation over micro-batches, and
bumps the policy version (= optimizer steps taken).
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass

import numpy as np
import torch

from rlvr.grpo import LossConfig, policy_loss, token_logprobs
from rlvr.records import atomic_file


@dataclass
class Batch:
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    advantages: list[float]
    behaviour_logprobs: list[list[float]] | None = None
    loss_mask: list[bool] | None = None     # False: sequence excluded (e.g. truncated)


def merge_metrics(per_rank: list[dict]) -> dict[str, float]:
    """Metrics of one step over all ranks: losses add up (each rank's is its share of the
    batch's loss), token-level means are weighted by tokens, counts add up."""
    if len(per_rank) == 1:
        m = dict(per_rank[0])
    else:
        toks = [r.get("_tokens", 0.0) for r in per_rank]
        total = sum(toks)
        m = {}
        for k in per_rank[0]:
            vals = [r.get(k, float("nan")) for r in per_rank]
            if k.startswith("loss/") or k in ("train/sequences", "train/tokens", "_tokens", "_diff_sum", "_diff_n"):
                m[k] = float(sum(vals))
            elif k in ("grad/norm", "lr"):
                m[k] = vals[0]
            else:
                pairs = [(v, t) for v, t in zip(vals, toks) if t and v == v]
                m[k] = sum(v * t for v, t in pairs) / sum(t for _, t in pairs) if pairs and total else float("nan")
        n = m.get("_diff_n", 0.0)
        m["logprob/engine_vs_trainer_abs_diff"] = m.get("_diff_sum", 0.0) / n if n else float("nan")
    for k in ("_tokens", "_diff_sum", "_diff_n"):
        m.pop(k, None)
    return m


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
            "float16": torch.float16}[dtype]


def lr_lambda(schedule: str, warmup: int, total: int):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
        return 1.0 - frac if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * frac))
    return f


def _shard(model, compute_dtype: torch.dtype) -> None:
    """FSDP2: shard each decoder layer, then the rest of the model; parameters are cast to
    compute_dtype for forward/backward, gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    layers = getattr(getattr(model, "model", model), "layers", [])
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)


class PolicyTrainer:
    def __init__(self, model_path: str, tcfg, max_tokens: int, total_steps: int, trust_remote_code: bool = False,
                 ref_path: str | None = None, temperature: float = 1.0, rank: int = 0, world: int = 1):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = tcfg
        # Data parallel over `world` ranks with FSDP (torch.distributed must be initialised by
        # the caller: NCCL on GPUs, gloo on CPUs). Each rank takes every world-th sequence.
        self.rank, self.world = rank, world
        # Log-probs are taken under the sampling temperature, as the engine reports them.
        self.temperature = temperature if temperature > 0 else 1.0
        torch.manual_seed(tcfg.seed)
        random.seed(tcfg.seed)
        np.random.seed(tcfg.seed)
        self.device = resolve_device(tcfg.device)
        if self.device == "cuda" and world > 1:
            self.device = f"cuda:{torch.cuda.current_device()}"
        # Mixed precision: fp32 master weights and optimizer state, forward/backward in
        # self.dtype (bf16 on GPUs). Pure-bf16 AdamW would round most updates of lr ~1e-6 away.
        self.dtype = resolve_dtype(tcfg.dtype, self.device)
        self.model_path = model_path
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                          trust_remote_code=trust_remote_code).to(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        if tcfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        if world > 1:
            _shard(self.model, self.dtype)
        self.model.train()
        self.ref = None
        if tcfg.beta > 0:
            # The reference is the initial policy, also when resuming from a checkpoint.
            self.ref = AutoModelForCausalLM.from_pretrained(ref_path or model_path, dtype=torch.float32,
                                                            trust_remote_code=trust_remote_code).to(self.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
            if world > 1:
                _shard(self.ref, self.dtype)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay,
                                     betas=(tcfg.adam_beta1, tcfg.adam_beta2))
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(tcfg.lr_schedule, tcfg.warmup_steps, total_steps))
        self.loss_cfg = LossConfig(loss_type=tcfg.loss_type, clip_low=tcfg.clip_low, clip_high=tcfg.clip_high,
                                   beta=tcfg.beta, tis_cap=tcfg.tis_cap, max_tokens=max_tokens)
        self.version = 0
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.tokenizer.eos_token_id or 0)

    # -- forward ---------------------------------------------------------------------------

    def _collate(self, prompts: list[list[int]], comps: list[list[int]]):
        """Left-pad prompts and right-pad completions so every completion starts at column P."""
        P = max(len(p) for p in prompts)
        L = max(1, max(len(c) for c in comps))
        n = len(prompts)
        ids = torch.full((n, P + L), self.pad_id, dtype=torch.long)        # [N, P+L]
        attn = torch.zeros((n, P + L), dtype=torch.long)                    # [N, P+L]
        cmask = torch.zeros((n, L), dtype=torch.float32)                    # [N, L]
        targets = torch.full((n, L), self.pad_id, dtype=torch.long)         # [N, L]
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

    def _logprobs(self, model, prompts, comps, with_entropy=False):
        ids, attn, pos, targets, cmask, L = self._collate(prompts, comps)
        dev = self.device
        autocast = self.world == 1 and self.dtype != torch.float32
        with torch.autocast(device_type=dev.split(":")[0], dtype=self.dtype, enabled=autocast):
            out = model(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                        logits_to_keep=L + 1, use_cache=False)
        # [N, L, V] logits predicting the completion, in fp32 before the temperature (as vLLM)
        logits = out.logits[:, :L, :].float() / self.temperature
        del out
        logp, _ = token_logprobs(logits, targets.to(dev))                    # [N, L]
        ent = None
        if with_entropy:
            with torch.no_grad():                                             # a diagnostic: no graph
                _, ent = token_logprobs(logits.detach(), targets.to(dev), with_entropy=True)
        return logp, ent, cmask.to(dev)

    # -- one optimizer step ----------------------------------------------------------------

    def step(self, batch: Batch) -> dict[str, float]:
        """One optimizer step over the batch (this rank's share of it when world > 1).

        Returns metrics; with several ranks, merge them with merge_metrics()."""
        n = len(batch.prompt_ids)
        keep = batch.loss_mask or [True] * n
        idx_all = [i for i in range(n) if keep[i] and batch.completion_ids[i]]
        idx = idx_all[self.rank::self.world]
        metrics_acc: dict[str, float] = {}
        tok_weights = 0.0
        diffs_sum, diffs_n = 0.0, 0
        tokens_total = float(sum(len(batch.completion_ids[i]) for i in idx_all))
        self.opt.zero_grad(set_to_none=True)
        mb = max(1, self.cfg.micro_batch_size)
        # Every rank runs the same number of micro-batches (FSDP's collectives need all ranks);
        # a rank with nothing left runs one masked dummy sequence.
        n_mb = max(1, math.ceil(math.ceil(len(idx_all) / self.world) / mb)) if idx_all else 0
        for k in range(n_mb):
            part = idx[k * mb:(k + 1) * mb]
            dummy = not part
            prompts = [batch.prompt_ids[i] for i in part] or [[self.pad_id]]
            comps = [batch.completion_ids[i] for i in part] or [[self.pad_id]]
            logp, ent, mask = self._logprobs(self.model, prompts, comps, with_entropy=True)   # [n, L]
            if dummy:
                mask = torch.zeros_like(mask)
            old = logp.detach()
            beh = None
            if batch.behaviour_logprobs is not None and not dummy:
                beh = torch.zeros_like(old)
                for j, i in enumerate(part):
                    lp = batch.behaviour_logprobs[i]
                    if lp:
                        beh[j, :len(lp)] = torch.tensor(lp, dtype=old.dtype)
                diffs_sum += float(((old - beh).abs() * mask).sum())
                diffs_n += int(mask.sum())
            ref = None
            if self.ref is not None:
                with torch.no_grad():
                    ref, _, _ = self._logprobs(self.ref, prompts, comps)
            adv = torch.tensor([batch.advantages[i] for i in part] or [0.0], device=self.device)
            loss, m = policy_loss(logp, old, adv, mask, self.loss_cfg, behaviour_logp=beh, ref_logp=ref,
                                  entropy=ent.detach() if ent is not None else None, n_total=len(idx_all),
                                  tokens_total=tokens_total)
            # Losses are normalised by the whole batch's counts, so the ranks' gradients must be
            # summed; FSDP averages them over ranks, hence the factor.
            (loss * self.world).backward()
            w = float(mask.sum())
            tok_weights += w
            for key, v in m.items():
                if key.startswith("loss/"):
                    metrics_acc[key] = metrics_acc.get(key, 0.0) + v        # already scaled to the batch
                elif w:
                    metrics_acc[key] = metrics_acc.get(key, 0.0) + v * w
        for key in list(metrics_acc):
            if not key.startswith("loss/"):
                metrics_acc[key] = metrics_acc[key] / tok_weights if tok_weights else float("nan")
        grad_norm = 0.0
        if idx_all:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip))
            self.opt.step()
        lr = self.sched.get_last_lr()[0]
        self.sched.step()
        self.version += 1
        metrics_acc.update({
            "grad/norm": grad_norm,
            "lr": lr,
            "train/sequences": float(len(idx)),
            "train/tokens": float(sum(len(batch.completion_ids[i]) for i in idx)),
            "logprob/engine_vs_trainer_abs_diff": diffs_sum / diffs_n if diffs_n else float("nan"),
            "_tokens": tok_weights, "_diff_sum": diffs_sum, "_diff_n": float(diffs_n),
        })
        return metrics_acc

    # -- weights out -----------------------------------------------------------------------

    def full_state_dict(self) -> dict:
        """The unsharded state dict (a collective call with several ranks: all must call it)."""
        if self.world == 1:
            return self.model.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def weights(self) -> list[tuple[str, np.ndarray, str]] | None:
        """(name, array, dtype) per parameter, as numpy (bf16 travels as int16 bits: exact).
        With several ranks every rank must call it; rank 0 returns the weights, others None."""
        sd = self.full_state_dict()
        if self.rank != 0:
            return None
        tied = bool(getattr(self.model.config, "tie_word_embeddings", False))
        out = []
        for name, t in sd.items():
            if tied and name == "lm_head.weight":
                continue  # the engine ties it to the embedding itself: do not send it twice
            t = t.detach().to("cpu", dtype=self.dtype)
            if t.dtype == torch.bfloat16:
                out.append((name, t.view(torch.int16).numpy(), "bfloat16"))
            else:
                out.append((name, t.numpy(), str(t.dtype).replace("torch.", "")))
        return out

    # -- checkpoints -----------------------------------------------------------------------

    def save(self, path: str, extra_state: dict) -> None:
        """A Hugging Face folder (model, tokenizer, generation config) + trainer_state.pt last.
        With several ranks every rank must call it: each writes its optimizer shard."""
        sd = self.full_state_dict()
        opt_state = self.opt.state_dict()
        if self.world > 1:
            torch.save(opt_state, os.path.join(path, f"optimizer_rank{self.rank:03d}.pt"))
            opt_state = None
        if self.rank == 0:
            if getattr(self.model.config, "tie_word_embeddings", False):
                # gathered copies are no longer one tensor: keep the checkpoint's tied layout
                sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
            self.model.save_pretrained(path, state_dict=sd, safe_serialization=True)
            self.tokenizer.save_pretrained(path)
            gen = os.path.join(self.model_path, "generation_config.json")
            if os.path.exists(gen) and not os.path.exists(os.path.join(path, "generation_config.json")):
                import shutil

                shutil.copy(gen, path)
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()
        if self.rank != 0:
            return
        state = {
            "version": self.version,
            "world": self.world,
            "optimizer": opt_state,
            "scheduler": self.sched.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
            **extra_state,
        }
        with atomic_file(os.path.join(path, "trainer_state.pt")) as fh:
            torch.save(state, fh)

    def load_state(self, path: str) -> dict:
        """Restore optimizer, scheduler, version and RNG from a checkpoint; returns the state dict.
        (The weights come from constructing the trainer on the checkpoint folder.)"""
        state = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=False)
        if state.get("world", 1) != self.world:
            raise ValueError(f"{path} was saved by {state.get('world', 1)} trainer rank(s); resume with the same "
                             f"train.num_trainers")
        if self.world > 1:
            self.opt.load_state_dict(torch.load(os.path.join(path, f"optimizer_rank{self.rank:03d}.pt"),
                                                weights_only=False))
        else:
            self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        return state
