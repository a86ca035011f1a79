"""math_qwen for lm-eval: Qwen-style MATH prompts scored by rlvr's math verifier.

`Question: ...\nAnswer:` prompts, 4 chain-of-thought exemplars ending in \\boxed{} (the
problems of Minerva's exemplars), the answer taken from the last \\boxed{} or else from
"The answer is X", compared with the gold \\boxed{} answer by symbolic equivalence.
"""

from rlvr.textutil import last_boxed
from rlvr.verifiers.math import equivalent, extract_answer, normalize


def process_docs(dataset):
    def _doc(doc: dict) -> dict:
        return {"problem": doc["problem"], "solution": doc["solution"], "answer": last_boxed(doc["solution"]) or ""}

    return dataset.map(_doc)


def process_results(doc: dict, results: list) -> dict:
    pred, _how = extract_answer(results[0], last_number=False)
    ok = pred is not None and bool(normalize(doc["answer"])) and equivalent(doc["answer"], pred)[0]
    return {"exact_match": int(ok)}


def list_fewshot_samples() -> list:
    return [
        {"problem": "Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.",
         "solution": "The expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so "
                     "$x\\ge2$, and $5 - x \\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, "
                     "so $5-x>0$, which gives $x<5$. Therefore, the domain of the expression is $\\boxed{[2,5)}$."},
        {"problem": "If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find "
                    "$\\det (\\mathbf{A} \\mathbf{B}).$",
         "solution": "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = "
                     "(2)(12) = 24$. The answer is $\\boxed{24}$."},
        {"problem": "Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound weights instead, "
                    "how many times must Terrell lift them in order to lift the same total weight?",
         "solution": "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot 12\\cdot20=480$ "
                     "pounds of weight.  If he lifts two 15-pound weights instead for $n$ times, he will lift a total "
                     "of $2\\cdot15\\cdot n=30n$ pounds of weight.  Equating this to 480 pounds, we can solve for "
                     "$n$: $30n=480$, so $n=480/30=16$. The answer is $\\boxed{16}$."},
        {"problem": "If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\\\n6y-9x &=b.\n\\end{align*}has a "
                    "solution $(x, y)$ where $x$ and $y$ are both nonzero,\nfind $\\frac{a}{b},$ assuming $b$ is "
                    "nonzero.",
         "solution": "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n$$6y-9x=-\\frac{3}{2}a.$$"
                     "Since we also know that $6y-9x=b$, we have\n\n$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}="
                     "-\\frac{2}{3}.$$The answer is $\\boxed{-\\frac{2}{3}}$."},
    ]
