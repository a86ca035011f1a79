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


@dataclass
class Batch:
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    advantages: list[float]
    behaviour_logprobs: list[list[float]] | None = None
    loss_mask: list[bool] | None = None     # False: sequence excluded (e.g. truncated)


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


class PolicyTrainer:
    def __init__(self, model_path: str, tcfg, max_tokens: int, total_steps: int, trust_remote_code: bool = False,
                 ref_path: str | None = None, temperature: float = 1.0):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.cfg = tcfg
        # Log-probs are taken under the sampling temperature, as the engine reports them.
        self.temperature = temperature if temperature > 0 else 1.0
        torch.manual_seed(tcfg.seed)
        random.seed(tcfg.seed)
        np.random.seed(tcfg.seed)
        self.device = resolve_device(tcfg.device)
        self.dtype = resolve_dtype(tcfg.dtype, self.device)
        self.model_path = model_path
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=self.dtype,
                                                          trust_remote_code=trust_remote_code).to(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        if tcfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.model.train()
        self.ref = None
        if tcfg.beta > 0:
            # The reference is the initial policy, also when resuming from a checkpoint.
            self.ref = AutoModelForCausalLM.from_pretrained(ref_path or model_path, dtype=self.dtype,
                                                            trust_remote_code=trust_remote_code).to(self.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
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
        out = model(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                    logits_to_keep=L + 1, use_cache=False)
        logits = out.logits[:, :L, :] / self.temperature                     # [N, L, V] predicts completion
        logp, ent = token_logprobs(logits, targets.to(dev), with_entropy)   # [N, L]
        return logp, ent, cmask.to(dev)

    # -- one optimizer step ----------------------------------------------------------------

    def step(self, batch: Batch) -> dict[str, float]:
        n = len(batch.prompt_ids)
        keep = batch.loss_mask or [True] * n
        idx = [i for i in range(n) if keep[i] and batch.completion_ids[i]]
        metrics_acc: dict[str, float] = {}
        tok_weights = 0.0
        diffs_sum, diffs_n = 0.0, 0
        tokens_total = float(sum(len(batch.completion_ids[i]) for i in idx))
        self.opt.zero_grad(set_to_none=True)
        mb = max(1, self.cfg.micro_batch_size)
        for s in range(0, len(idx), mb):
            part = idx[s:s + mb]
            prompts = [batch.prompt_ids[i] for i in part]
            comps = [batch.completion_ids[i] for i in part]
            logp, ent, mask = self._logprobs(self.model, prompts, comps, with_entropy=True)   # [n, L]
            old = logp.detach()
            beh = None
            if batch.behaviour_logprobs is not None:
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
            adv = torch.tensor([batch.advantages[i] for i in part], device=self.device)
            loss, m = policy_loss(logp, old, adv, mask, self.loss_cfg, behaviour_logp=beh, ref_logp=ref,
                                  entropy=ent.detach() if ent is not None else None, n_total=len(idx),
                                  tokens_total=tokens_total)
            loss.backward()
            w = float(mask.sum())
            tok_weights += w
            for k, v in m.items():
                if k.startswith("loss/"):
                    metrics_acc[k] = metrics_acc.get(k, 0.0) + v        # already scaled to the batch
                else:
                    metrics_acc[k] = metrics_acc.get(k, 0.0) + v * w
        for k in list(metrics_acc):
            if not k.startswith("loss/"):
                metrics_acc[k] = metrics_acc[k] / tok_weights if tok_weights else float("nan")
        grad_norm = 0.0
        if idx:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip))
            self.opt.step()
        lr = self.sched.get_last_lr()[0]
        self.sched.step()
        self.version += 1
        metrics_acc.update({
            "grad/norm": grad_norm,
            "lr": lr,
            "train/sequences": float(len(idx)),
            "train/tokens": tokens_total,
            "logprob/engine_vs_trainer_abs_diff": diffs_sum / diffs_n if diffs_n else float("nan"),
        })
        return metrics_acc

    # -- weights out -----------------------------------------------------------------------

    def weights(self) -> list[tuple[str, np.ndarray, str]]:
        """(name, array, dtype) per parameter, as numpy (bf16 travels as int16 bits: exact)."""
        out = []
        for name, t in self.model.state_dict().items():
            t = t.detach().to("cpu")
            if t.dtype == torch.bfloat16:
                out.append((name, t.view(torch.int16).numpy(), "bfloat16"))
            else:
                out.append((name, t.numpy(), str(t.dtype).replace("torch.", "")))
        return out

    # -- checkpoints -----------------------------------------------------------------------

    def save(self, path: str, extra_state: dict) -> None:
        """A Hugging Face folder (model, tokenizer, generation config) + trainer_state.pt last."""
        self.model.save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        gen = os.path.join(self.model_path, "generation_config.json")
        if os.path.exists(gen) and not os.path.exists(os.path.join(path, "generation_config.json")):
            import shutil

            shutil.copy(gen, path)
        state = {
            "version": self.version,
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
            **extra_state,
        }
        tmp = os.path.join(path, "trainer_state.pt.tmp")
        torch.save(state, tmp)
        os.replace(tmp, os.path.join(path, "trainer_state.pt"))

    def load_state(self, path: str) -> dict:
        """Restore optimizer, scheduler, version and RNG from a checkpoint; returns the state dict.
        (The weights come from constructing the trainer on the checkpoint folder.)"""
        state = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=False)
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        return state
