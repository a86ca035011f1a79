"""Compute the reference results the IF verifier tests compare against (run by hand, rarely).

The tests must not need lm-eval, IFBench, open-instruct or NLTK downloads, so this script
runs those reference implementations once and stores their per-instruction results under
tests/data/. It needs an NLTK data directory holding NLTK's own ``punkt_tab``,
``stopwords`` and ``averaged_perceptron_tagger_eng`` (``python -m nltk.downloader
punkt_tab stopwords averaged_perceptron_tagger_eng``; point NLTK_DATA at it), and:

    # IFEval: lm-evaluation-harness's ifeval scoring (pip install lm-eval==0.4.13)
    NLTK_DATA=DIR python bench/if_reference.py ifeval --runs 5
    # IFBench: an allenai/IFBench checkout (writable: it creates .nltk_data inside)
    NLTK_DATA=DIR python bench/if_reference.py ifbench --src PATH/TO/IFBench
    # IF multi-constraints: an allenai/open-instruct checkout (only open_instruct/IFEvalG is used)
    NLTK_DATA=DIR python bench/if_reference.py if_multi --src PATH/TO/open-instruct
    # check the NLTK data packaged under rlvr/resources against that directory
    NLTK_DATA=DIR python bench/if_reference.py resources

Each writes JSONL lines {id, strict, loose, ...}; the README in each tests/data folder
says which command, versions and date produced the file.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
IFEVAL_RECORDS = os.path.join(ROOT, "tests", "data", "ifeval", "ifeval_gpt4.jsonl.gz")
IFBENCH_SAMPLE = os.path.join(ROOT, "tests", "data", "ifbench", "ifbench_sample.jsonl.gz")
IFBENCH_CASES = os.path.join(ROOT, "tests", "data", "ifbench", "cases.jsonl")
IF_MULTI_CASES = os.path.join(ROOT, "tests", "data", "ifeval", "if_multi_cases.jsonl")


def read_jsonl(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(ln) for ln in fh if ln.strip()]


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(rows)} lines)", file=sys.stderr)


def variants(response: str) -> list[str]:
    r = response.split("\n")
    first, last, both = "\n".join(r[1:]).strip(), "\n".join(r[:-1]).strip(), "\n".join(r[1:-1]).strip()
    return [response, response.replace("*", ""), first, last, both,
            first.replace("*", ""), last.replace("*", ""), both.replace("*", "")]


def upstream_score(registry: dict, rec: dict, response: str) -> tuple[list[bool], list[bool]]:
    """The strict/loose loop shared by Google's, lm-eval's and IFBench's evaluation code."""
    strict, loose = [], []
    for iid, kw in zip(rec["instruction_id_list"], rec.get("kwargs") or [{}] * len(rec["instruction_id_list"])):
        inst = registry[iid](iid)
        inst.build_description(**{k: v for k, v in (kw or {}).items() if v is not None})
        strict.append(bool(response.strip() and inst.check_following(response)))
        loose.append(any(bool(v.strip() and inst.check_following(v)) for v in variants(response)))
    return strict, loose


def cmd_ifeval(args) -> None:
    import nltk
    from lm_eval.tasks.ifeval import utils  # noqa: F401  (downloads nothing when NLTK_DATA has punkt_tab)

    tok = nltk.data.load("nltk:tokenizers/punkt/english.pickle")
    recs = read_jsonl(IFEVAL_RECORDS)
    runs = []
    for _ in range(args.runs):
        out = []
        for rec in recs:
            doc = {"key": rec["key"], "instruction_id_list": rec["instruction_id_list"],
                   "prompt": rec["prompt"], "kwargs": rec["kwargs"]}
            res = utils.process_results(doc, [rec["completions"][0]])
            out.append((res["inst_level_strict_acc"], res["inst_level_loose_acc"]))
        runs.append(out)
    rows = []
    for i, rec in enumerate(recs):
        strict, loose = runs[0][i]
        varies = [j for j in range(len(strict)) if len({(r[i][0][j], r[i][1][j]) for r in runs}) > 1]
        response = rec["completions"][0]
        rows.append({"id": rec["id"], "strict": strict, "loose": loose, "varies": varies,
                     "sentences": [len(tok.tokenize(v)) for v in variants(response)],
                     "words": [len(nltk.word_tokenize(v)) for v in variants(response)]})
    write_jsonl(os.path.join(ROOT, "tests", "data", "ifeval", "reference_lm_eval.jsonl"), rows)
    n = sum(len(r["strict"]) for r in rows)
    print(f"prompt strict {sum(all(r['strict']) for r in rows)}/{len(rows)}, "
          f"inst strict {sum(sum(r['strict']) for r in rows)}/{n}, "
          f"prompt loose {sum(all(r['loose']) for r in rows)}/{len(rows)}, "
          f"inst loose {sum(sum(r['loose']) for r in rows)}/{n}; "
          f"varying across {args.runs} runs: {[r['id'] for r in rows if r['varies']]}", file=sys.stderr)


def cmd_ifbench(args) -> None:
    sys.path.insert(0, os.path.abspath(args.src))
    from ifbench import instructions_registry

    for src, dst in ((IFBENCH_SAMPLE, "reference_sample.jsonl"), (IFBENCH_CASES, "reference_cases.jsonl")):
        rows = []
        for rec in read_jsonl(src):
            res = [upstream_score(instructions_registry.INSTRUCTION_DICT, rec, c) for c in rec["completions"]]
            rows.append({"id": rec["id"], "strict": [s for s, _ in res], "loose": [lo for _, lo in res]})
        write_jsonl(os.path.join(ROOT, "tests", "data", "ifbench", dst), rows)


def cmd_if_multi(args) -> None:
    # Load open_instruct.IFEvalG without running open_instruct/__init__ (heavy imports).
    pkg = types.ModuleType("open_instruct")
    pkg.__path__ = [os.path.join(os.path.abspath(args.src), "open_instruct")]
    sys.modules["open_instruct"] = pkg
    registry = importlib.import_module("open_instruct.IFEvalG.instructions_registry").INSTRUCTION_DICT
    rows = []
    for rec in read_jsonl(IF_MULTI_CASES):
        res = [upstream_score(registry, rec, c) for c in rec["completions"]]
        rows.append({"id": rec["id"], "strict": [s for s, _ in res], "loose": [lo for _, lo in res]})
    write_jsonl(os.path.join(ROOT, "tests", "data", "ifeval", "reference_if_multi.jsonl"), rows)


def _sha(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def cmd_resources(args) -> None:
    import nltk

    ours = os.path.join(ROOT, "rlvr", "resources", "nltk_data")
    for rel in ["tokenizers/punkt_tab/english/" + f for f in
                ("abbrev_types.txt", "collocations.tab", "sent_starters.txt", "ortho_context.tab")] + \
               ["corpora/stopwords/english"]:
        theirs = nltk.data.find(rel)
        same = _sha(os.path.join(ours, rel)) == _sha(str(theirs))
        print(f"{'same' if same else 'DIFFERENT'}  {rel}")
    from nltk.tag.perceptron import PerceptronTagger

    ref = PerceptronTagger()
    with gzip.open(os.path.join(ours, "taggers", "averaged_perceptron_tagger_eng.json.gz"), "rt") as fh:
        model = json.load(fh)
    same = (model["weights"] == ref.model.weights and model["tagdict"] == ref.tagdict
            and set(model["classes"]) == set(ref.classes))
    print(f"{'same' if same else 'DIFFERENT'}  taggers/averaged_perceptron_tagger_eng")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ifeval")
    p.add_argument("--runs", type=int, default=5, help="score this many times to spot run-to-run variation")
    p = sub.add_parser("ifbench")
    p.add_argument("--src", required=True)
    p = sub.add_parser("if_multi")
    p.add_argument("--src", required=True)
    sub.add_parser("resources")
    args = ap.parse_args()
    if "NLTK_DATA" not in os.environ:
        ap.error("set NLTK_DATA to a directory with NLTK's punkt_tab, stopwords and averaged_perceptron_tagger_eng")
    {"ifeval": cmd_ifeval, "ifbench": cmd_ifbench, "if_multi": cmd_if_multi, "resources": cmd_resources}[args.cmd](args)


if __name__ == "__main__":
    main()
