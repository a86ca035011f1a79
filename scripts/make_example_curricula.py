"""Write the example curricula of configs/qwen3-1.7B-mix.yaml (easy first, by the data's own signal).

    python scripts/make_example_curricula.py GSM8K_TRAIN_JSONL MBPP_JSONL configs/curricula/

gsm8k: the train split ordered by the number of reasoning steps of its reference solution
(lines before "#### N"); mbpp: the train split (task ids 601-974) by the number of lines of its
reference code. Ties keep the dataset's order. Without a model in the loop this is a proxy for
difficulty; bin/make-curriculum.sh orders by a base model's measured pass@1 instead.
"""

from __future__ import annotations

import os
import sys

from rlvr.data import load_records
from rlvr.data.sources import load_rows


def write(path: str, ids: list[str], header: str) -> None:
    with open(path, "w") as fh:
        fh.write(header)
        fh.writelines(f"{i}\n" for i in ids)
    print(f"{path}: {len(ids)} ids", file=sys.stderr)


def main(gsm8k: str, mbpp: str, out: str) -> None:
    rows = load_rows(gsm8k)
    recs = load_records("gsm8k", split="train", source=gsm8k)
    steps = [sum(1 for ln in str(r["answer"]).split("####")[0].splitlines() if ln.strip()) for r in rows]
    order = sorted(range(len(recs)), key=lambda i: (steps[i], i))
    write(os.path.join(out, "gsm8k-easy-first.txt"), [recs[i]["id"] for i in order],
          "# gsm8k train, fewest reasoning steps first (scripts/make_example_curricula.py)\n")
    rows = {int(r["task_id"]): r for r in load_rows(mbpp)}
    recs = load_records("mbpp", split="train", source=mbpp)
    size = {r["id"]: sum(1 for ln in str(rows[int(r["id"].split("/")[1])]["code"]).splitlines() if ln.strip())
            for r in recs}
    write(os.path.join(out, "mbpp-easy-first.txt"), sorted(size, key=lambda i: (size[i], int(i.split("/")[1]))),
          "# mbpp train (task ids 601-974), shortest reference code first (scripts/make_example_curricula.py)\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
