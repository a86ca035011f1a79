"""rlvr-train's plan, the memory arithmetic: a model's dimensions from its config.json
(`ModelShape`, `read_model_config`), one trainer rank's estimated peak (`trainer_memory`), one
engine's share of its GPU (`engine_memory`) and what engines may take of a GPU they share with
trainer ranks (`engine_fraction`). Arithmetic only: no weights are read, nothing is allocated.
rlvr.train.plan makes the plan from it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

GIB = 2**30
CUDA_CONTEXT_GIB = 0.5        # the CUDA context and cuBLAS workspaces of a process, outside PyTorch's allocator
FRAGMENTATION = 0.10          # PyTorch's caching allocator reserves about this much over what is allocated
ENGINE_MIN_KV_GIB = 1.0       # the least KV cache worth starting an engine with
SHARED_GPU_HEADROOM = 0.95    # at most this fraction of a shared GPU is planned for
BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float32": 4, "fp32": 4}


# -- the model ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a decoder-only transformer, from its config.json."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    max_position: int = 0
    name: str = ""

    @classmethod
    def from_config(cls, cfg: dict, name: str = "") -> ModelShape:
        cfg = dict(cfg.get("text_config") or cfg) if "text_config" in cfg else cfg
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
                   kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or hidden // heads),
                   intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
                   tied=bool(cfg.get("tie_word_embeddings", False)),
                   max_position=int(cfg.get("max_position_embeddings") or 0), name=name)

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (Llama/Qwen layout: q, k, v, o, gated MLP, two norms, q/k norms)."""
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return q + kv + o + mlp + 2 * self.hidden + 2 * self.head_dim

    @property
    def params(self) -> int:
        emb = self.vocab * self.hidden
        return emb * (1 if self.tied else 2) + self.layers * self.layer_params + self.hidden

    @property
    def largest_tensor(self) -> int:
        """Elements of the largest single tensor (the embedding, for every model of this kind)."""
        return max(self.vocab * self.hidden, self.intermediate * self.hidden,
                   self.hidden * self.heads * self.head_dim)

    def tensors(self) -> list[int]:
        """Elements of every tensor the weight sync sends, in the order it sends them (the
        model's parameter order: the embedding, each layer's attention, q/k norms, MLP and
        norms, the final norm, an untied output layer)."""
        H, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        layer = [H * q, H * kv, H * kv, q * H, self.head_dim, self.head_dim, self.intermediate * H,
                 self.intermediate * H, H * self.intermediate, H, H]
        return [self.vocab * H, *layer * self.layers, H, *([self.vocab * H] * (not self.tied))]

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def read_model_config(path: str) -> tuple[dict, str]:
    """The model's config.json as a dict, and where it came from. Reads only that file: a
    folder holding just config.json is enough. "tiny" is rlvr's tiny model (its dimensions);
    an s3:// folder has its config.json fetched alone; a hub name is read from the local
    hub cache, else its config.json alone is fetched."""
    from rlvr.errors import ConfigError

    if path == "tiny":
        return {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                "head_dim": 64, "intermediate_size": 256, "vocab_size": 384, "tie_word_embeddings": True,
                "max_position_embeddings": 2048}, "rlvr.tiny"
    if path.startswith("s3://"):
        from rlvr.s3 import download_cached

        uri = path.rstrip("/") + "/config.json"
        with open(download_cached(uri)) as fh:      # that object alone, through the download cache
            return json.load(fh), uri
    local = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if os.path.isfile(local):
        try:
            with open(local) as fh:
                return json.load(fh), local
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{local}: not a readable model config ({e})") from None
    if os.path.exists(path) or path.startswith((".", "/")):
        raise ConfigError(f"model.path {path}: no config.json there")
    from rlvr.data.sources import _hub_reachable, _quiet_hub

    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if not isinstance(cached, str):
            offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no", "off")
            why = "HF_HUB_OFFLINE is set" if offline else _hub_reachable()
            if why is not None:     # one quick check, not the hub client's retries
                raise OSError(f"not in the hub cache, and the hub is unreachable: {why}")
            with _quiet_hub():
                cached = hf_hub_download(path, "config.json")
        with open(cached) as fh:
            return json.load(fh), cached
    except Exception as e:  # noqa: BLE001 - offline, unknown repository, ...
        raise ConfigError(f"model.path {path}: cannot read its config.json ({type(e).__name__}: {e}); give a "
                          "local folder holding it") from None


# -- memory ------------------------------------------------------------------------------------

def trainer_memory(shape: ModelShape, tokens: int, *, world: int = 1, compute_bytes: int = 2,
                   gradient_checkpointing: bool = True, logprob_chunk: int = 1024, reference: bool = False,
                   on_gpu: bool = True, sends: bool = False, broadcast: bool = False, bucket_bytes: int = 0) -> dict:
    """Estimated peak GPU memory of trainer rank 0 (the largest), in GiB, with its parts.

    P parameters, T tokens in the largest micro-batch (padded: rlvr.train.plan.microbatches),
    H hidden, Hkv = kv_heads x head_dim, I intermediate, V vocabulary, L layers, E the
    embedding's parameters (V x H, twice untied: the root module's), W ranks, c bytes of the
    compute dtype (2 for bf16):

    - states: fp32 master weights 4P, fp32 gradients 4P, AdamW's two moments 8P, each divided
      by W (FSDP shards them); with W > 1 also the unsharded fp32 gradients FSDP accumulates
      over micro-batches before its one reduce-scatter, 4P.
    - the compute copy: cP on one rank (rlvr.train.trainer_model.MasterWeights); with W > 1
      two decoder layers gathered (FSDP gathers one ahead) and the root module (embedding,
      output layer, final norm), cE: FSDP2 does not reshard the root after its forward.
    - the reference policy (train.loss.beta > 0): cP on one rank (held in the compute dtype);
      with W > 1 loaded in fp32 and sharded, 4P / W, plus its own gathered layers and root, as
      the policy's (rlvr.train.trainer_model.load_reference).
    - activations: with gradient checkpointing, every layer's input, L x T x H x c, plus one
      layer recomputed in the backward pass with its gradients, T x (c (16H + 6Hkv + 4I) +
      4 (6H + 2Hkv) + c (4H + 2I)) bytes (projections, attention, the gated MLP, fp32 RMSNorm
      intermediates); without it, L such layers.
    - loss path: the fused selective log-softmax keeps two chunk x V float32 buffers
      (logits, then their gradient), plus the output layer's gradient twice (the chunk's and
      the one accumulated), 2 x V x H x c; with more than one chunk in a 2-byte dtype the
      output layer is handed over as an fp32 copy and its gradient summed in fp32
      (rlvr.train.trainer_forward.head_logprobs): the copy, the chunk's and the sum, 3 x V x H x 4.
    - optimizer step: foreach AdamW makes one fp32 temporary of every moment it updates, 4P /
      W.
    - weights out (after the step, rlvr.train.trainer_weights; `sends`: the run syncs weights):
      with W > 1 and a broadcast (`broadcast`: sync nccl or gloo) rank 0 keeps every parameter
      gathered in the compute dtype, cP; buckets packed on the GPU (bucket_bytes > 0: the
      nccl broadcast), two in flight (`two_buckets`: the largest two consecutive buckets of
      the model's tensors in send order); otherwise one tensor at a time, at most 4 x the
      largest.
    - the three phases (forward/backward, optimizer step, weights out) are not live at the
      same time: the largest counts, over the persistent states. Within the backward, with
      checkpointing, the loss path's buffers are freed before the last layer is recomputed:
      the checkpoints plus the larger of the loss path and one recomputed layer (with W > 1
      also the root's unsharded output-layer gradient, V x H x c, held until the embedding's
      backward; one rank moves it to its fp32 master at once). Without checkpointing every
      layer's activations are live at the loss.
    - the allocator's fragmentation (+10%) and the CUDA context (0.5 GiB).

    Qwen3-1.7B (P = 1.72e9) at 32,768 tokens, bf16, checkpointing, one rank: about 44 GiB
    (bench/bench_plan_memory.py holds the arithmetic against a measured CPU step;
    bench/gpu_check.py measures the real peak on a GPU)."""
    P, H, L, V, I = shape.params, shape.hidden, shape.layers, shape.vocab, shape.intermediate
    Hkv = shape.kv_heads * shape.head_dim
    c, W, T = compute_bytes, max(1, world), max(1, int(tokens))
    root = shape.vocab * shape.hidden * (1 if shape.tied else 2) + shape.hidden
    parts: dict[str, float] = {}
    parts["master_weights"] = 4 * P / W                      # fp32 parameters (the model itself in fp32)
    parts["gradients"] = 4 * P / W + (4 * P if W > 1 else 0.0)
    parts["optimizer"] = 8 * P / W
    if W == 1:
        parts["compute_copy"] = c * P if c < 4 else 0.0
    else:
        parts["compute_copy"] = c * (2 * shape.layer_params + root)
    if not reference:
        parts["reference"] = 0.0
    elif W == 1:
        parts["reference"] = c * P
    else:
        parts["reference"] = 4 * P / W + c * (2 * shape.layer_params + root)
    layer = T * (c * (16 * H + 6 * Hkv + 4 * I) + 4 * (6 * H + 2 * Hkv) + c * (4 * H + 2 * I))
    checkpoints = L * T * H * c
    parts["activations"] = checkpoints + layer if gradient_checkpointing else L * layer
    chunk = min(T, logprob_chunk or T)
    fp32_head = T > chunk and c < 4          # head_logprobs' fp32 copy and fp32 gradient sum
    parts["loss_path"] = 2 * chunk * V * 4 + (3 * V * H * 4 if fp32_head else 2 * V * H * c)
    parts["optimizer_step"] = 4 * P / W
    largest = shape.largest_tensor
    parts["weights_out"] = c * P if W > 1 and broadcast else 0.0
    if bucket_bytes:
        parts["sync_buffers"] = two_buckets([c * n for n in shape.tensors()], int(bucket_bytes))
    else:
        parts["sync_buffers"] = 4 * largest if sends else 0.0
    if gradient_checkpointing:      # the loss path's buffers are freed before the first layer is recomputed
        forward_backward = checkpoints + max(layer + (V * H * c if W > 1 else 0.0), parts["loss_path"])
    else:
        forward_backward = parts["activations"] + parts["loss_path"]
    transient = max(forward_backward, parts["optimizer_step"], parts["weights_out"] + parts["sync_buffers"])
    persistent = sum(parts[k] for k in ("master_weights", "gradients", "optimizer", "compute_copy", "reference"))
    allocated = persistent + transient
    total = allocated * (1 + FRAGMENTATION) + (CUDA_CONTEXT_GIB * GIB if on_gpu else 0)
    out = {k: round(v / GIB, 2) for k, v in parts.items()}
    out.update({"tokens_per_microbatch": T, "allocated_bytes": int(allocated), "allocated_gib": round(allocated / GIB, 2),
                "est_peak_gib": round(total / GIB, 2)})
    return out


def two_buckets(sizes: list[int], bucket_bytes: int) -> int:
    """Bytes of the largest two consecutive buckets the broadcast packs from tensors of `sizes`
    bytes in send order, a bucket closed once it holds more than bucket_bytes (the rule of
    rlvr.engines.transfer.plan_buckets; vLLM's NCCL transport keeps two in flight)."""
    filled, total = [], 0
    for n in sizes:
        total += n
        if total > bucket_bytes:
            filled.append(total)
            total = 0
    filled.append(total)
    return max(a + b for a, b in zip(filled, [*filled[1:], 0]))


def engine_memory(shape: ModelShape, fraction: float, gpu_mem_gib: float | None, dtype_bytes: int = 2,
                  tensor_parallel: int = 1) -> dict:
    """One engine's GPU memory: vLLM takes `fraction` of the GPU (gpu_memory_utilization) and
    fits the weights (P x dtype bytes / tensor_parallel), its activations and CUDA graphs
    (about 1 GiB, profiled at start) and the KV cache in it; the rest is KV cache, of
    2 x L x Hkv x bytes per token."""
    weights = shape.params * dtype_bytes / max(1, tensor_parallel) / GIB
    out = {"weights_gib": round(weights, 2), "fraction": round(fraction, 4)}
    if gpu_mem_gib is None:
        out["est_peak_gib"] = None
        return out
    budget = fraction * gpu_mem_gib
    kv = budget - weights - 1.0
    out.update({"est_peak_gib": round(budget, 2), "kv_cache_gib": round(kv, 2),
                "kv_tokens": int(max(0.0, kv) * GIB // max(1, shape.kv_bytes_per_token(dtype_bytes) // tensor_parallel))})
    return out


def engine_fraction(gpu_mem_gib: float, trainer_gib: float, engines: int, wanted: float) -> float:
    """The memory fraction each of `engines` engines may take on a GPU of gpu_mem_gib GiB where
    trainer ranks need trainer_gib GiB: what they leave, shared equally, under `wanted`."""
    free = gpu_mem_gib * SHARED_GPU_HEADROOM - trainer_gib
    return max(0.0, min(wanted, free / (gpu_mem_gib * max(1, engines))))


def shared_fractions(gpu_mem_gib: float, trainer_gib: float, wanted: list[float]) -> list[float]:
    """The memory fractions vLLM engines (rollout engines and distillation teachers alike: each
    takes its fraction of the whole GPU) may take on one GPU where trainer ranks need
    trainer_gib GiB: the wanted fractions scaled by one factor (at most 1) so that, with the
    trainers, at most SHARED_GPU_HEADROOM of the GPU is planned."""
    free = gpu_mem_gib * SHARED_GPU_HEADROOM - trainer_gib
    total = sum(wanted)
    scale = min(1.0, max(0.0, free / (gpu_mem_gib * total))) if total > 0 else 1.0
    return [w * scale for w in wanted]
