"""rlvr-port-config: convert a training config of halflearned/rlvr-experiments to rlvr-train's (see rlvr.port_config)."""

from __future__ import annotations

import json
import sys

import click

from rlvr.cli import BadInput, ConfigError, run, say, warn, with_examples

HELP = with_examples(
    """Convert one of the users' own training configs into an rlvr-train config.

    Reads THEIR.yaml (a config of halflearned/rlvr-experiments: run, model, training,
    loss, data, data_iter, sampling, roles, sync ...) and writes the rlvr-train config on
    stdout. Every key of theirs is accounted for: mapped to rlvr keys of the same meaning,
    implied (rlvr behaves so already), pending (an rlvr key, such as sync.every_steps,
    train.adam_eps, sft.* or teacher.*, that this rlvr-train does not accept: written as a
    --set line to add once it does), or without an equivalent, with why. The output ends
    with that account as YAML comments; stderr gets the counts and the pending keys, and a
    warning per key the port does not know (FILE: KEY PATH). Values are type-checked against
    the rlvr keys they become: a wrong one (max_steps: abc) exits 3 with one line naming the
    file, their key and the rlvr key.

    Their code's silent defaults are ported too: no loss.name means Dr. GRPO with C =
    2048; each dataset's max_completion_len overrides sampling.max_tokens
    (rollout.max_tokens_by_dataset) and each dataset has its own prompt format
    (data.template); GRPO always refills the batch with informative groups
    (dapo.dynamic_sampling, no overlong punishment); the PPO ratio is taken against the
    engine's log-probs; the group std is the population's; torchtitan's AdamW defaults
    (weight decay 0.1, beta2 0.95, grad clip 1.0).

    --report FILE writes the account as JSON (their key, kind, rlvr keys, why, value).
    """,
    """
rlvr-port-config configs/qwen3-1.7B-gsm8k-grpo-lr5e6.yaml > gsm8k-grpo.yaml
rlvr-train gsm8k-grpo.yaml --set model.path=Qwen/Qwen3-1.7B-Base
rlvr-port-config their.yaml --report port.json > ours.yaml
""",
)


@click.command(help=HELP)
@click.argument("config", type=click.Path(dir_okay=False), metavar="THEIR.yaml")
@click.option("--report", type=click.Path(dir_okay=False), metavar="FILE", help="Write the account of every key as JSON.")
def cmd(config, report):
    import yaml

    from rlvr.port_config import port_config

    try:
        with open(config, encoding="utf-8") as fh:
            their = yaml.safe_load(fh)
    except OSError as e:
        raise ConfigError(f"{config}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{config}:{mark.line + 1}" if mark is not None else config
        raise BadInput(f"{where}: not YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(their, dict):
        raise BadInput(f"{config}: expected a YAML mapping of sections")
    port = port_config(their, source=config)
    sys.stdout.write(port.yaml())
    sys.stdout.flush()
    c = port.counts()
    say(f"{c['mapped']} keys mapped, {c['implied']} implied, {c['pending']} pending, "
        f"{c['unmapped']} without an rlvr equivalent (the comments at the end of the output list them)")
    if port.changed:
        say("meaning changed: " + ", ".join(port.changed) + " (the comments on them say how)")
    for key, (value, why) in port.pending.items():
        say(f"pending: {key}={json.dumps(value)} ({why})")
    for w in port.warnings:
        warn(w)
    if report:
        with open(report, "w", encoding="utf-8") as fh:
            json.dump(port.report(), fh, indent=1, default=str)


main = run(cmd)

if __name__ == "__main__":
    main()
