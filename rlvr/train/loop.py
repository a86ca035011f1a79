"""rlvr-train's driver: data stream -> engine actors -> verifier pool -> trainer actor -> weights.

One loop serves the synchronous and the asynchronous mode. Batch k (prompts [kB, (k+1)B) of
the stream) trains the optimizer step that turns policy version k into k+1. It is admitted to
the engines only once the weights they will generate with have version v >= k - max_staleness,
so every sample obeys t - v <= max_staleness at the step that uses it; with max_staleness 0
the loop is synchronous (generate, verify, train, sync). The bound paces admission: nothing is
generated that would be too stale, so nothing is discarded for staleness.

Weights go from the trainer to every engine after each step, tagged with the new version.
Engine calls run in order per actor, so an update lands between two generate calls. A dead or
hung engine (no answer within sync.generate_timeout_s) is killed, restarted from the current
weights and its prompts are requeued (counted as faults/requeued_prompts); training goes on.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from rlvr.engines.base import prompt_seed
from rlvr.errors import Failure
from rlvr.messages import say
from rlvr.runs import (Traces, checkpoint_dir, commit_checkpoint, end_manifest, init_run_dir, latest_checkpoint,
                       prune_checkpoints, tmp_checkpoint_dir, truncate_traces, update_manifest)
from rlvr.train.config import TrainConfig
from rlvr.train.trainer import merge_metrics

GT_FIELDS = ("answer", "tests", "test_setup", "test", "entry_point", "prefix", "instruction_id_list", "kwargs")


def log(msg: str) -> None:
    say(msg)  # "rlvr-train: msg", named by rlvr.cli.run


@dataclass
class Chunk:
    engine: int
    ref: object
    items: list        # [(record, epoch)]
    submitted: float
    actor: object = None  # the engine actor it was sent to (a restarted engine is a new actor)


def prompt_token_ids(tokenizer, prompt) -> list[int]:
    """The same tokenisation rlvr-rollout uses (chat messages through the chat template)."""
    from rlvr.engines.base import encode_prompt

    return encode_prompt(tokenizer, prompt, chat_template=False)


class Run:
    def __init__(self, cfg: TrainConfig, run_dir: str, argv: list[str], config_yaml: str, resume: bool):
        self.cfg = cfg
        self.run_dir = run_dir
        self.argv = argv
        self.config_yaml = config_yaml
        self.resume = resume
        self.faults = defaultdict(int)

    # -- set-up ------------------------------------------------------------------------------

    def _base_model(self) -> str:
        from rlvr.models import resolve_model

        path = self.cfg.model.path
        if path == "tiny":
            path = os.path.join(self.run_dir, "base_model")
            if not os.path.exists(os.path.join(path, "config.json")):
                from rlvr.tiny import build

                build(path, seed=self.cfg.train.seed)
            return path
        # s3://... (and Org/Name under $RLVR_S3_MODELS) -> a local folder, before any engine starts
        m = resolve_model(path, log=log)
        update_manifest(self.run_dir, model=m.record())
        return m.path

    def _env(self) -> dict:
        keep = ("OMP_NUM_THREADS", "VLLM_CPU_KVCACHE_SPACE", "TOKENIZERS_PARALLELISM", "CUDA_VISIBLE_DEVICES",
                "HF_HUB_OFFLINE", "VLLM_LOGGING_LEVEL", "PYTHONPATH")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        return env

    def _ray_init(self) -> None:
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            return
        # Actor logs (vLLM's start-up chatter) reach stderr only with RLVR_DEBUG=1; errors
        # raised in actors always surface through ray.get.
        kw: dict = {"include_dashboard": False, "log_to_driver": bool(os.environ.get("RLVR_DEBUG")),
                    "logging_level": "ERROR"}
        if self.cfg.ray.address:
            ray.init(address=self.cfg.ray.address, **kw)
        else:
            if self.cfg.ray.temp_dir:  # e.g. NVMe when / is small; Ray wants an absolute path
                os.makedirs(self.cfg.ray.temp_dir, exist_ok=True)
                kw["_temp_dir"] = os.path.abspath(self.cfg.ray.temp_dir)
            ray.init(num_cpus=self.cfg.ray.num_cpus or os.cpu_count(), **kw)

    def _has_gpus(self) -> bool:
        import ray

        return ray.cluster_resources().get("GPU", 0) > 0

    def _engine_options(self) -> dict:
        r = self.cfg.rollout
        dtype = r.dtype
        if dtype == "auto":
            dtype = "bfloat16" if self._has_gpus() else "float32"
        return {"dtype": dtype, "max_model_len": r.max_model_len, "gpu_memory_utilization": r.gpu_memory_utilization,
                "tensor_parallel_size": r.tensor_parallel_size, "enforce_eager": r.enforce_eager, "seed": r.seed}

    def _new_engine(self, model_path: str):
        import ray

        from rlvr.train.actors import EngineActor

        r = self.cfg.rollout
        res: dict = {"num_cpus": r.engine_num_cpus}
        if self._has_gpus():
            res["num_gpus"] = r.engine_num_gpus * r.tensor_parallel_size
        if r.engine_resources:
            res["resources"] = dict(r.engine_resources)
        self._engine_count = getattr(self, "_engine_count", 0) + 1
        name = f"rlvr-engine-{self._engine_count}-{os.getpid()}-{id(self):x}"
        return ray.remote(max_restarts=0, max_concurrency=1, **res)(EngineActor).options(name=name).remote(
            model_path, r.engine, self._engine_options(), self._env())

    def _new_trainers(self, model_path: str, ref_path: str) -> list:
        import ray

        from rlvr.train.actors import TrainerActor

        t = self.cfg.train
        res: dict = {"num_cpus": t.trainer_num_cpus}
        if self._has_gpus():
            res["num_gpus"] = t.trainer_num_gpus
        if t.trainer_resources:
            res["resources"] = dict(t.trainer_resources)
        world = max(1, t.num_trainers)
        actors = [ray.remote(**res)(TrainerActor).options(name=f"rlvr-trainer-{r}-{os.getpid()}-{id(self):x}")
                  .remote(self._env()) for r in range(world)]
        master = ray.get(actors[0].address.remote()) if world > 1 else None
        ray.get([a.setup.remote(model_path, t, self.cfg.rollout.max_tokens, t.steps, self.cfg.model.trust_remote_code,
                                ref_path, self.cfg.rollout.temperature, r, world, master)
                 for r, a in enumerate(actors)])
        return actors

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> dict:
        import ray
        from transformers import AutoTokenizer

        from rlvr.train.stream import PromptStream

        cfg = self.cfg
        init_run_dir(self.run_dir, self.config_yaml, self.argv)
        base = self._base_model()
        start_step, model_path = 0, base
        if self.resume:
            ck = latest_checkpoint(self.run_dir)
            if ck is not None:
                start_step, model_path = ck
                truncate_traces(self.run_dir, start_step)
                log(f"resuming from {model_path} (step {start_step})")
            else:
                log("no complete checkpoint to resume from: starting at step 0")
                truncate_traces(self.run_dir, 0)
        update_manifest(self.run_dir, base_model=base, resumed_from_step=start_step if self.resume else None)
        stream = PromptStream(cfg.data)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self._ray_init()
        log(f"run folder {self.run_dir}")
        t0 = time.monotonic()
        self.trainers = self._new_trainers(model_path, base)
        self.trainer = self.trainers[0]
        if start_step:
            self._trainer_call([t.load_state.remote(model_path) for t in self.trainers], "loading the checkpoint")
        self.model_path = model_path
        self.base_path = base
        self._pending_syncs = {}
        self._last_done = {}
        self._prompt_ids: dict[str, list[int]] = {}
        self.engines = [self._new_engine(model_path) for _ in range(cfg.rollout.num_engines)]
        nodes = ray.get([e.node.remote() for e in self.engines] + [t.node.remote() for t in self.trainers])
        ne = len(self.engines)
        update_manifest(self.run_dir, placement={"engines": nodes[:ne], "trainer": nodes[ne],
                                                 "trainer_ranks": nodes[ne:]})
        log(f"{len(self.engines)} engine(s) and the trainer ready in {time.monotonic() - t0:.1f}s")
        self.synced_version = start_step
        from rlvr.train import weight_sync

        self.weight_sync = weight_sync.make(cfg, self.trainers, self.engines, log)
        # Engines loaded the same weights the trainer holds: tag them with its version.
        if start_step:
            self._sync(start_step, wait=True)
        uploader = self._uploader()
        traces = Traces(self.run_dir)
        from rlvr.verification.pool import VerifierPool

        vcfg = cfg.verify
        pool = VerifierPool(jobs=vcfg.jobs, timeout=vcfg.timeout, config=dict(vcfg.verifier_config),
                            reward_table=dict(vcfg.reward_table) or None, reward_mode=vcfg.reward_mode)
        status = "failed"
        last: dict = {}
        try:
            with pool:
                last = self._loop(stream, pool, traces, start_step, uploader)
            status = "completed"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            traces.close()
            end_manifest(self.run_dir, status, final_metrics=last, faults=dict(self.faults))
            for a in self.engines + self.trainers:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass
            if uploader is not None:
                uploader.submit(os.path.abspath(self.run_dir))  # the final traces and run.json
                failed = uploader.close(timeout=600)
                if failed:
                    log(f"{len(failed)} upload(s) to {self.cfg.checkpoint.upload} failed: {failed[0][1]}")
        return last

    def _uploader(self):
        if not self.cfg.checkpoint.upload:
            return None
        from rlvr.s3 import BackgroundUploader, Layout

        # Default: s3://bucket/prefix/ + <run folder name>/..., the layout rlvr-s3-sync pull
        # expects (upload.layout maps it otherwise). Checkpoints being written (hidden .tmp-*
        # folders) stay local; a checkpoint's completeness marker goes up after its weights, so
        # a remote copy is never falsely complete. The live files (traces) go up on their own
        # thread as steps end, never behind a checkpoint.
        u = self.cfg.upload
        run_dir = os.path.abspath(self.run_dir)
        up = BackgroundUploader(self.cfg.checkpoint.upload, root=run_dir,
                                layout=Layout(u.layout or Layout.DEFAULT, run=os.path.basename(run_dir)),
                                exclude=["*/.tmp-*"], last=["trainer_state.pt"])
        up.live([os.path.join(run_dir, p) for p in u.live], u.trace_interval_s)
        return up

    def _sampling(self) -> dict:
        r = self.cfg.rollout
        return {"n": r.n, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
                "max_tokens": r.max_tokens, "stop": None}

    def _launch(self, k: int, stream, launched: dict) -> bool:
        items = stream.batch(k, self.cfg.rollout.prompts_per_step)
        if not items:
            return False
        chunks = []
        ne = len(self.engines)
        for e in range(ne):
            part = items[e::ne]
            if part:
                chunks.append(self._submit(e, part))
        launched[k] = chunks
        return True

    def _submit(self, e: int, items) -> Chunk:
        ids = [prompt_token_ids(self.tokenizer, rec["prompt"]) for rec, _ in items]
        for (rec, _), x in zip(items, ids):
            self._prompt_ids[rec["id"]] = x  # reused when the batch is built: tokenise once
        seeds = [prompt_seed(self.cfg.rollout.seed, rec["id"], ep) for rec, ep in items]
        ref = self.engines[e].generate.remote(ids, self._sampling(), seeds)
        return Chunk(e, ref, items, time.monotonic(), self.engines[e])

    def _restart_engine(self, e: int, why: str) -> None:
        import ray

        log(f"engine {e} {why}: restarting it")
        self.faults["engine_restarts"] += 1
        if self.faults["engine_restarts"] > 5 * max(1, len(self.engines)):
            raise Failure("rollout engines keep failing (more than 5 restarts each): giving up")
        try:
            ray.kill(self.engines[e], no_restart=True)
        except Exception:  # noqa: BLE001
            pass
        self._pending_syncs.pop(e, None)  # died with the old actor; the new one is synced below
        # From the base model (a resumed run's checkpoint folder may since have been pruned),
        # then the current weights.
        self.engines[e] = self._new_engine(self.base_path)
        try:
            self.weight_sync.restore(e, self.synced_version, timeout_s=self.cfg.sync.timeout_s + 300)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
            raise Failure(f"engine {e} could not be restarted ({type(ex).__name__}: "
                          f"{str(ex).strip().splitlines()[-1][:200]})") from None
        self._last_done[e] = time.monotonic()

    def _collect(self, chunks: list[Chunk]) -> list[tuple]:
        """Wait for a batch's chunks; requeue those of engines that died or hung.
        Returns (record, epoch, sample group, version_start, version_end) per prompt, in the
        batch's prompt order (chunk e holds prompts e, e+E, e+2E, ... of the batch)."""
        import ray

        ne = len(self.engines)
        out: dict[int, tuple] = {}
        pending = list(chunks)
        limit = self.cfg.sync.generate_timeout_s
        while pending:
            ready, _ = ray.wait([c.ref for c in pending], num_returns=1, timeout=5.0)
            now = time.monotonic()
            nxt = []
            for c in pending:
                current = c.actor is self.engines[c.engine]
                if c.ref in ready:
                    try:
                        res = ray.get(c.ref)
                    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                            ray.exceptions.RayTaskError) as ex:
                        if current:  # else: queued on an engine already replaced, just resend
                            self._restart_engine(c.engine, f"failed ({type(ex).__name__})")
                        self.faults["requeued_prompts"] += len(c.items)
                        nxt.append(self._submit(c.engine, c.items))
                        continue
                    self._last_done[c.engine] = now
                    self._engine_busy += res["seconds"]
                    for j, ((rec, ep), group) in enumerate(zip(c.items, res["samples"])):
                        out[j * ne + c.engine] = (rec, ep, group, res["version_start"], res["version_end"])
                # A chunk queued behind others on its engine is timed from when the engine
                # last delivered, not from its submission.
                elif current and now - max(c.submitted, self._last_done.get(c.engine, 0.0)) > limit:
                    self._restart_engine(c.engine, f"gave no answer in {limit:.0f}s")
                    self.faults["requeued_prompts"] += len(c.items)
                    nxt.append(self._submit(c.engine, c.items))
                elif not current:
                    self.faults["requeued_prompts"] += len(c.items)
                    nxt.append(self._submit(c.engine, c.items))
                else:
                    nxt.append(c)
            pending = nxt
        return [out[i] for i in sorted(out)]

    def _sync(self, version: int, wait: bool) -> float:
        import ray

        t0 = time.monotonic()
        refs = self.weight_sync.push(version)   # {engine index: ref} (a broadcast: + the trainer ranks')
        self.synced_version = version
        if wait or self.weight_sync.blocking:
            # a broadcast waits for the engines' queued generate calls too when the loop is asynchronous
            limit = self.cfg.sync.timeout_s + (0 if wait else self.cfg.sync.generate_timeout_s)
            try:
                ray.get(list(refs.values()), timeout=limit)
            except ray.exceptions.GetTimeoutError:
                raise Failure(f"weight sync to version {version} took longer than {limit:.0f}s "
                              f"(sync.timeout_s): an engine is hung") from None
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
                # The weights come from the trainer: tell a dead trainer from a dead engine.
                self._trainer_call(self.trainer.version.remote(), f"the weight sync to version {version}")
                raise Failure(f"weight sync to version {version} failed: an engine died ({ex.__class__.__name__})") from None
        else:
            self._pending_syncs = refs
        return time.monotonic() - t0

    def _loop(self, stream, pool, traces, start_step: int, uploader) -> dict:
        import ray
        import torch

        from rlvr.grpo import group_advantages
        from rlvr.train.trainer import Batch

        cfg = self.cfg
        S = cfg.train.max_staleness
        total = cfg.train.steps
        launched: dict[int, list[Chunk]] = {}
        next_launch = start_step
        last: dict = {}
        t_start = time.monotonic()
        self._pending_syncs = {}
        self._last_done = {}
        trained = start_step
        for step in range(start_step, total):
            t_step = time.monotonic()
            self._engine_busy = 0.0
            while next_launch < total and next_launch <= self.synced_version + S:
                if not self._launch(next_launch, stream, launched):
                    break
                next_launch += 1
            if step not in launched:
                log(f"data stream ended after {step} steps")
                break
            queue_depth = len(launched) - 1
            t0 = time.monotonic()
            results = self._collect(launched.pop(step))
            t_rollout = time.monotonic() - t0
            for e, ref in list(self._pending_syncs.items()):
                try:
                    ray.get(ref, timeout=cfg.sync.timeout_s + cfg.sync.generate_timeout_s)
                except ray.exceptions.GetTimeoutError:
                    self._restart_engine(e, "did not apply a weight update in time")
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
                    # the weights come from the trainer: a dead trainer ends the run
                    self._trainer_call(self.trainer.version.remote(), f"the weight sync to version {step}")
                    self._restart_engine(e, f"failed a weight update ({type(ex).__name__})")
            self._pending_syncs = {}
            # -- rewards ---------------------------------------------------------------------
            t0 = time.monotonic()
            recs = []
            for rec, ep, group, v0, v1 in results:
                r = {k: rec[k] for k in ("id", "dataset", "verifier", "prompt", *GT_FIELDS) if k in rec}
                r["completions"] = [s["text"] for s in group]
                recs.append(r)
            verified = list(pool.verify_records(iter(recs)))
            t_reward = time.monotonic() - t0
            # -- batch -------------------------------------------------------------------------
            G = cfg.rollout.n
            rewards = torch.tensor([v["rewards"] for v in verified], dtype=torch.float32)   # [B, G]
            adv, zero_std = group_advantages(rewards, cfg.train.scale_rewards)               # [B, G], [B]
            b = Batch([], [], [], [], [])
            lengths, truncated, stale = [], 0, []
            for i, (rec, ep, group, v0, v1) in enumerate(results):
                pids = self._prompt_ids.pop(rec["id"], None) or prompt_token_ids(self.tokenizer, rec["prompt"])
                for j, s in enumerate(group):
                    b.prompt_ids.append(pids)
                    b.completion_ids.append(list(s["token_ids"]))
                    b.advantages.append(float(adv[i, j]))
                    b.behaviour_logprobs.append(list(s.get("logprobs") or []))
                    cut = s.get("finish_reason") == "length"
                    truncated += cut
                    lengths.append(len(s["token_ids"]))
                    keep = not (cfg.train.filter_zero_std and bool(zero_std[i]))
                    if cfg.train.mask_truncated and cut:
                        keep = False
                    b.loss_mask.append(keep)
                    stale.append(step - v0)
            if max(stale, default=0) > S:
                raise Failure(f"internal error: staleness {max(stale)} > max_staleness {S} at step {step}")
            t0 = time.monotonic()
            m = merge_metrics(self._trainer_call([t.step.remote(b) for t in self.trainers], f"step {step + 1}"))
            t_train = time.monotonic() - t0
            version = step + 1
            t_sync = self._sync(version, wait=(S == 0))
            # -- metrics, traces -----------------------------------------------------------------
            wall = time.monotonic() - t_step
            tokens = int(sum(lengths))
            metrics = {
                "step": version, "policy_version": version,
                "reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
                "reward/frac_zero_std": float(zero_std.float().mean()),
            }
            per_ds = defaultdict(list)
            for v in verified:
                per_ds[v.get("dataset") or "unknown"].extend(v["rewards"])
            for ds, rs in per_ds.items():
                metrics[f"reward/{ds}/mean"] = float(np.mean(rs))
            metrics.update({k: m[k] for k in m})
            hist = defaultdict(int)
            for s_ in stale:
                hist[s_] += 1
            metrics.update({
                "completions/mean_length": float(np.mean(lengths)) if lengths else 0.0,
                "completions/clipped_ratio": truncated / max(1, len(lengths)),
                "time/rollout_s": t_rollout, "time/reward_s": t_reward, "time/train_s": t_train, "time/sync_s": t_sync,
                "time/step_s": wall,
                "throughput/tokens_per_s": tokens / wall if wall > 0 else 0.0,
                "throughput/samples_per_s": len(lengths) / wall if wall > 0 else 0.0,
                "staleness/mean": float(np.mean(stale)) if stale else 0.0,
                "staleness/max": float(max(stale, default=0)),
                **{f"staleness/count_{k}": float(v) for k, v in sorted(hist.items())},
                "queue/batches_in_flight": float(queue_depth),
                "idle/trainer_s": max(0.0, wall - t_train),
                # engine time not spent generating, summed over engines (approximate in async
                # mode, where a step collects work that started during the previous one)
                "idle/engines_s": max(0.0, len(self.engines) * wall - self._engine_busy),
                "faults/engine_restarts": float(self.faults["engine_restarts"]),
                "faults/requeued_prompts": float(self.faults["requeued_prompts"]),
                "faults/dropped_prompts": 0.0,
                "samples/total": float((step + 1 - start_step) * G * cfg.rollout.prompts_per_step),
                "time/elapsed_s": time.monotonic() - t_start,
            })
            traces.metrics(metrics)
            for i, v in enumerate(verified):
                rec, ep, group, v0, v1 = results[i]
                out = dict(v)
                out.update({"step": version, "policy_version": v0, "policy_version_end": v1, "epoch": ep,
                            "finish_reasons": [s.get("finish_reason") for s in group]})
                traces.rollout(out)
                if i < cfg.log.samples_per_step:
                    traces.sample({"step": version, "id": v["id"], "prompt": v["prompt"],
                                   "completion": v["completions"][0] if v["completions"] else "",
                                   "reward": v["rewards"][0] if v["rewards"] else None,
                                   "verdict": v["verdicts"][0] if v.get("verdicts") else None})
            if uploader is not None:
                uploader.tick()  # the live traces changed: sent on the uploader's thread
            if cfg.log.stdout:
                from rlvr.records import dumps

                sys.stdout.buffer.write(dumps(metrics))
                sys.stdout.flush()
            done = version - start_step
            eta = (time.monotonic() - t_start) / done * (total - version) if done else 0
            log(f"step {version}/{total} reward {metrics['reward/mean']:.3f} "
                f"len {metrics['completions/mean_length']:.1f} tok/s {metrics['throughput/tokens_per_s']:.0f} "
                f"staleness {metrics['staleness/mean']:.2f} step {wall:.2f}s ETA {eta:.0f}s")
            last = metrics
            trained = version
            every = cfg.checkpoint.every
            if version == total or (every and version % every == 0):
                self._checkpoint(version, uploader)
        if trained > start_step and trained != total and not (cfg.checkpoint.every and trained % cfg.checkpoint.every == 0):
            self._checkpoint(trained, uploader)  # the data ran out before train.steps
        return last

    def _trainer_call(self, ref, what: str):
        """ray.get on a trainer call; a dead or failing trainer ends the run with one clear line."""
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as ex:
            why = f"the trainer process died during {what} ({type(ex).__name__})"
        except ray.exceptions.RayTaskError as ex:
            cause = ex.as_instanceof_cause() if hasattr(ex, "as_instanceof_cause") else ex
            why = f"the trainer failed during {what}: {type(cause).__name__}: {str(cause).strip().splitlines()[-1][:300]}"
        ck = latest_checkpoint(self.run_dir)
        where = f"the last complete checkpoint is {ck[1]} (step {ck[0]}); continue with --resume {self.run_dir}" \
            if ck else "no checkpoint was completed"
        raise Failure(f"{why}; {where}")

    def _checkpoint(self, step: int, uploader) -> None:
        import ray

        t0 = time.monotonic()
        tmp = tmp_checkpoint_dir(self.run_dir, step)
        self._trainer_call([t.save.remote(tmp, {"step": step, "config": self.config_yaml}) for t in self.trainers],
                           f"saving checkpoint {step}")
        final = checkpoint_dir(self.run_dir, step)
        commit_checkpoint(tmp, final)
        prune_checkpoints(self.run_dir, self.cfg.checkpoint.keep_last, self.cfg.checkpoint.keep_every)
        log(f"checkpoint {final} ({time.monotonic() - t0:.1f}s)")
        if uploader is not None:
            uploader.submit(os.path.abspath(self.run_dir))  # off this thread; unchanged files are skipped


def train(cfg: TrainConfig, run_dir: str, argv: list[str], config_yaml: str, resume: bool = False) -> dict:
    return Run(cfg, run_dir, argv, config_yaml, resume).run()
