"""Rebuild the AllenAI-format fixture files of this folder from the public anchors (see
README.md): `python tests/data/allenai/make_fixtures.py /work/shared/anchors`."""

from __future__ import annotations

import base64
import json
import os
import pickle
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

# Tulu 3's prompts as open-instruct's scripts/create_ground_truth_data.py builds them: the
# 8 GSM8K chain-of-thought exemplars, then "Question: ..."; the same for MATH with its 4.
GSM8K_SHOTS = [
    ("There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, "
     "there will be 21 trees. How many trees did the grove workers plant today?",
     "There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have "
     "been 21 - 15 = 6. So the answer is 6."),
    ("If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
     "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. So the answer is 5."),
    ("Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?",
     "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After eating 35, "
     "they had 74 - 35 = 39. So the answer is 39."),
    ("Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did "
     "Jason give to Denny?",
     "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny 20 - 12 = 8. "
     "So the answer is 8."),
    ("Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have now?",
     "Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. 5 + 4 = 9. "
     "So the answer is 9."),
    ("There were nine computers in the server room. Five more computers were installed each day, from monday to "
     "thursday. How many computers are now in the server room?",
     "There were originally 9 computers. For each of 4 days, 5 more computers were added. So 5 * 4 = 20 "
     "computers were added. 9 + 20 is 29. So the answer is 29."),
    ("Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. How many golf "
     "balls did he have at the end of wednesday?",
     "Michael started with 58 golf balls. After losing 23 on tuesday, he had 58 - 23 = 35. After losing 2 more, "
     "he had 35 - 2 = 33 golf balls. So the answer is 33."),
    ("Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
     "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 dollars "
     "left. 23 - 15 is 8. So the answer is 8."),
]
MATH_SHOTS = [
    ("If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find $\\det (\\mathbf{A} \\mathbf{B}).$",
     "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = (2)(12) = "
     "\\boxed{24}.$"),
]
# Tulu 3's constraint texts (the IFEval taxonomy) and their ground-truth objects
IF_ROWS = [
    ("Write a haiku about the sea.", "All Lowercase",
     "Your entire response should be in English, and in all lowercase letters. No capital letters are allowed.",
     {"func_name": "validate_lowercase"}),
    ("Describe a sunrise.", "Include Keywords", "Include keywords ['amber', 'horizon'] in the response.",
     {"func_name": "verify_keywords", "keyword_list": ["amber", "horizon"]}),
    ("Explain what a prime number is.", "Number Words", "Answer with at most 20 words",
     {"func_name": "validate_word_constraint", "N": 20, "quantifier": "at most"}),
]
IF_ARGS = ("N", "quantifier", "end_phrase", "keyword_list", "word", "forbidden_words", "letter", "i", "first_word",
           "postscript_marker", "options", "section_splitter", "original_prompt")

# MBPP tasks 11, 14 and 12 rewritten as stdin/stdout programs, each MBPP test as an input and
# the output the rewritten solution prints. Task 14's solution prints a float (240.0) where
# the test says 240: equal under open-instruct's line-by-line, numbers-by-value comparison.
STDIO_ROWS = [
    (11, "Read a string on the first line of standard input and a single character on the second line. "
         "Remove the first and the last occurrence of that character from the string and print the result.",
     "s = input()\nch = input()\ni = s.find(ch)\nif i >= 0:\n    s = s[:i] + s[i + 1:]\n"
     "j = s.rfind(ch)\nif j >= 0:\n    s = s[:j] + s[j + 1:]\nprint(s)\n",
     [('assert remove_Occ("hello","l") == "heo"', {"input": "hello\nl\n", "output": "heo\n"}),
      ('assert remove_Occ("abcda","a") == "bcd"', {"input": "abcda\na\n", "output": "bcd\n"}),
      ('assert remove_Occ("PHP","P") == "H"', {"input": "PHP\nP\n", "output": "H\n"})]),
    (14, "Read three numbers l, b and h (the base length, base height and length of a triangular prism) "
         "separated by spaces on one line, and print the volume of the prism, l * b * h / 2.",
     "l, b, h = map(int, input().split())\nprint((l * b * h) / 2)\n",
     [("assert find_Volume(10,8,6) == 240", {"input": "10 8 6\n", "output": "240\n"}),
      ("assert find_Volume(3,2,2) == 6", {"input": "3 2 2\n", "output": "6\n"}),
      ("assert find_Volume(1,2,1) == 1", {"input": "1 2 1\n", "output": "1\n"})]),
    (12, "The first line holds n, the next n lines the rows of a matrix of integers (separated by spaces). "
         "Print the rows sorted in ascending order of their sums, one row a line.",
     "n = int(input())\nrows = [list(map(int, input().split())) for _ in range(n)]\n"
     "for r in sorted(rows, key=sum):\n    print(*r)\n",
     [("assert sort_matrix([[1, 2, 3], [2, 4, 5], [1, 1, 1]])==[[1, 1, 1], [1, 2, 3], [2, 4, 5]]",
       {"input": "3\n1 2 3\n2 4 5\n1 1 1\n", "output": "1 1 1\n1 2 3\n2 4 5\n"}),
      ("assert sort_matrix([[1, 2, 3], [-2, 4, -5], [1, -1, 1]])==[[-2, 4, -5], [1, -1, 1], [1, 2, 3]]",
       {"input": "3\n1 2 3\n-2 4 -5\n1 -1 1\n", "output": "-2 4 -5\n1 -1 1\n1 2 3\n"}),
      ("assert sort_matrix([[5,8,9],[6,4,3],[2,1,4]])==[[2, 1, 4], [6, 4, 3], [5, 8, 9]]",
       {"input": "3\n5 8 9\n6 4 3\n2 1 4\n", "output": "2 1 4\n6 4 3\n5 8 9\n"})]),
]


def prompt(shots, question: str) -> str:
    return "".join(f"Question: {q.strip()}\nAnswer:{a.strip()}\n\n" for q, a in shots) + f"Question: {question.strip()}"


def jl(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main(anchors: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    from rlvr.verifiers.allenai_rules import last_boxed, unbox

    gsm = [json.loads(ln) for ln in open(os.path.join(anchors, "gsm8k", "train.jsonl"))][:4]
    math = [json.loads(ln) for ln in open(os.path.join(anchors, "math", "math500_test.jsonl"))][:2]
    mbpp_all = [json.loads(ln) for ln in open(os.path.join(anchors, "mbpp", "mbpp.jsonl"))]
    mbpp = mbpp_all[10:13]
    tulu = [{"messages": [{"role": "user", "content": prompt(GSM8K_SHOTS, r["question"])}],
             "ground_truth": r["answer"].split("####")[-1].strip(), "dataset": "gsm8k",
             "constraint_type": None, "constraint": None} for r in gsm]
    tulu += [{"messages": [{"role": "user", "content": prompt(MATH_SHOTS, r["problem"])}],
              "ground_truth": unbox(last_boxed(r["solution"])), "dataset": "MATH",
              "constraint_type": None, "constraint": None} for r in math]
    for q, ctype, ctext, gt in IF_ROWS:
        full = {"func_name": gt["func_name"], **{a: gt.get(a) for a in IF_ARGS}}
        tulu.append({"messages": [{"role": "user", "content": f"{q} {ctext}"}], "ground_truth": json.dumps(full),
                     "dataset": "ifeval", "constraint_type": ctype, "constraint": ctext})
    open(os.path.join(HERE, "rlvr_gsm_math_if_mixed.jsonl"), "w").write(jl(tulu))

    # the OLMo 3 mixtures' forms: one-entry lists, IFEvalG ground truth as a Python literal,
    # code rows with assert lists (one in open-instruct's base64 + zlib + pickle encoding)
    think = [{"id": "math-0", "messages": [{"role": "user", "content": math[0]["problem"]}],
              "ground_truth": [unbox(last_boxed(math[0]["solution"]))], "dataset": ["math"]},
             {"id": "if-0", "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                         {"role": "user", "content": "Name three colors. Do not use any commas."}],
              "ground_truth": [str([{"instruction_id": ["punctuation:no_comma"], "kwargs": [None]}])],
              "dataset": ["ifeval"]}]
    for k, r in enumerate(mbpp):
        tests = r["test_list"]
        gt = base64.b64encode(zlib.compress(pickle.dumps(tests))).decode() if k == 2 else tests
        think.append({"id": f"code-{r['task_id']}", "messages": [
            {"role": "user", "content": f"{r['text']} Your code should pass this test: {tests[0]}"}],
            "ground_truth": gt, "dataset": "code"})
    open(os.path.join(HERE, "thinker_mix.jsonl"), "w").write(jl(think))
    # code_stdio rows as open-instruct's scripts/data/rlvr_code/code_upload_batch_stdio.py writes
    # them: an MBPP task rewritten as a stdin/stdout program (rewritten_input, rewritten_solution),
    # its tests the MBPP ones as {"input", "output"} pairs the solution passes, the ground truth
    # json.dumps of that list; the third in the thinker mixtures' form (one-entry lists) with the
    # base64 + zlib + pickle encoding.
    by_id = {r["task_id"]: r for r in mbpp_all}
    stdio = []
    for k, (tid, text, solution, tests) in enumerate(STDIO_ROWS):
        assert by_id[tid]["test_list"] == [t for t, _ in tests], tid   # the MBPP tests, rewritten
        cases = [c for _, c in tests]
        row = {"id": f"code_stdio-{tid}", "messages": [{"role": "user", "content": text}],
               "ground_truth": json.dumps(cases), "dataset": "code_stdio", "good_program": True,
               "rewritten_solution": solution, "rewritten_input": text}
        if k == 2:
            row.update(ground_truth=[base64.b64encode(zlib.compress(pickle.dumps(cases))).decode()],
                       dataset=["code_stdio"])
        stdio.append(row)
    open(os.path.join(HERE, "code_stdio.jsonl"), "w").write(jl(stdio))
    refused = [{"messages": [{"role": "user", "content": "Write a poem."}], "ground_truth": "a good poem",
                "dataset": "general-quality_ref"},
               {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                "ground_truth": "Paris", "dataset": "string_f1"}]
    open(os.path.join(HERE, "unverifiable.jsonl"), "w").write(jl(refused))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/anchors")
