"""Text resources of the IF checkers, offline and deterministic.

The upstream checkers call NLTK (Punkt sentences, the Treebank word tokenizer, the
averaged-perceptron POS tagger, the English stopword list), langdetect and ``random``.
This module gives them the same functions without downloads or run-to-run variation:

- NLTK's algorithms (ported in ``nltk_port``) run on NLTK's own models, packaged under
  ``rlvr/resources/nltk_data`` (see the README there for provenance). Nothing is fetched
  and the user's NLTK data is not read, so a verdict cannot change with what happens to
  be installed. A missing file raises ``ResourceMissing`` with one clear line.
- ``detect_language`` is langdetect with a private factory whose seed is fixed (plain
  ``langdetect.detect`` draws a new random seed per call); the global langdetect state is
  left alone.
- ``RNG`` is the generator the vendored checkers draw from where upstream would use
  ``random``; the evaluator reseeds it before each instruction, so a record that lacks a
  parameter still gets the same verdict every run.

Results are cached per text (small LRU caches): the loose score checks up to eight
variants of a response against every instruction, and most checks tokenise the same text.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import random
import re
from importlib import resources

from rlvr.verifiers.vendored import nltk_port

RNG = random.Random(0)

_WORDS = re.compile(r"\w+", re.UNICODE | re.MULTILINE | re.DOTALL)


class ResourceMissing(RuntimeError):
    """A data file that ships with rlvr is missing (a broken install)."""


def _data_file(*parts: str):
    path = resources.files("rlvr").joinpath("resources", "nltk_data", *parts)
    if not path.is_file():
        raise ResourceMissing(
            f"missing packaged resource rlvr/resources/nltk_data/{'/'.join(parts)} "
            "(it ships with rlvr; reinstall the package, no download is attempted)"
        )
    return path


def _lines(*parts: str) -> list[str]:
    # NLTK's tab/txt readers drop one trailing newline per line and keep the rest.
    text = _data_file(*parts).read_text(encoding="utf-8")
    return [ln for ln in text.split("\n")[: -1 if text.endswith("\n") else None]]


@functools.cache
def punkt() -> nltk_port.PunktSentenceTokenizer:
    """NLTK's Punkt sentence tokenizer with its English model (punkt_tab/english)."""
    base = ("tokenizers", "punkt_tab", "english")
    params = nltk_port.PunktParameters(
        abbrev_types=_lines(*base, "abbrev_types.txt"),
        collocations=(tuple(ln.split("\t")) for ln in _lines(*base, "collocations.tab")),
        sent_starters=_lines(*base, "sent_starters.txt"),
        ortho_context={a: int(b) for a, b in (ln.split("\t") for ln in _lines(*base, "ortho_context.tab"))},
    )
    return nltk_port.PunktSentenceTokenizer(params)


@functools.lru_cache(maxsize=128)
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(punkt().tokenize(text))


def sent_tokenize(text: str) -> list[str]:
    """``nltk.sent_tokenize(text)`` (English Punkt)."""
    return list(_sentences(text))


_treebank = functools.cache(nltk_port.NLTKWordTokenizer)


@functools.lru_cache(maxsize=128)
def _words(text: str) -> tuple[str, ...]:
    tok = _treebank()
    return tuple(w for sent in _sentences(text) for w in tok.tokenize(sent))


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)``: Punkt sentences, then NLTK's Treebank word tokenizer."""
    return list(_words(text))


def regexp_words(text: str) -> list[str]:
    """``nltk.tokenize.RegexpTokenizer(r"\\w+").tokenize(text)``."""
    return _WORDS.findall(text)


def ngrams(seq, n: int):
    """``nltk.ngrams(seq, n)`` (no padding): tuples of n consecutive items."""
    return zip(*(seq[i:] for i in range(n)))


@functools.cache
def tagger() -> nltk_port.PerceptronTagger:
    """NLTK's averaged-perceptron POS tagger (averaged_perceptron_tagger_eng)."""
    path = _data_file("taggers", "averaged_perceptron_tagger_eng.json.gz")
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        model = json.load(fh)
    return nltk_port.PerceptronTagger(model["weights"], model["tagdict"], model["classes"])


def pos_tag(tokens: list[str]) -> list[tuple[str, str]]:
    """``nltk.pos_tag(tokens)`` (English, Penn Treebank tags)."""
    if isinstance(tokens, str):
        raise TypeError("tokens: expected a list of strings, got a string")
    return tagger().tag(list(tokens))


@functools.cache
def stopwords() -> frozenset[str]:
    """``nltk.corpus.stopwords.words("english")`` as a set."""
    return frozenset(ln for ln in _lines("corpora", "stopwords", "english") if ln.rstrip())


try:  # langdetect is a dependency; keep the import cheap and the name importable
    from langdetect.lang_detect_exception import LangDetectException
except ImportError:  # pragma: no cover - reported at first use instead
    class LangDetectException(Exception):  # type: ignore[no-redef]
        pass


@functools.cache
def _lang_factory():
    """langdetect's factory with its 55 profiles loaded in sorted order, seed 0.

    Plain langdetect loads the profiles in ``os.listdir`` order, which varies between
    file systems and changes the order of its float sums; sorted order does not. The
    probabilities are computed as langdetect computes them (count / n-gram total) and
    kept as one row per n-gram in a matrix, which ``_FastDetector`` reads.
    """
    import numpy as np
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

    names = sorted(f for f in os.listdir(PROFILES_DIRECTORY)
                   if not f.startswith(".") and os.path.isfile(os.path.join(PROFILES_DIRECTORY, f)))
    profiles = []
    for f in names:
        with open(os.path.join(PROFILES_DIRECTORY, f), encoding="utf-8") as fh:
            profiles.append(json.load(fh))
    index: dict[str, int] = {}
    cells: list[tuple[list[int], list[float]]] = []
    for prof in profiles:
        rows, probs = [], []
        n_words = prof["n_words"]
        for word, count in prof["freq"].items():
            row = index.setdefault(word, len(index))
            if 1 <= len(word) <= 3:
                rows.append(row)
                probs.append(1.0 * count / n_words[len(word) - 1])
        cells.append((rows, probs))
    matrix = np.zeros((len(index), len(profiles)))
    for col, (rows, probs) in enumerate(cells):
        matrix[rows, col] = probs
    factory = DetectorFactory()
    factory.langlist = [p["name"] for p in profiles]
    factory.word_lang_prob_map = index  # only membership is read outside _FastDetector
    factory.matrix = matrix
    factory.set_seed(0)
    return factory


def _fast_detector_class():
    from langdetect.detector import Detector
    from langdetect.lang_detect_exception import ErrorCode

    from langdetect.utils.ngram import NGram

    normalize = functools.lru_cache(maxsize=65536)(NGram.normalize)
    index = _lang_factory().word_lang_prob_map

    @functools.lru_cache(maxsize=65536)
    def word_ngrams(word: str, space_after: bool) -> tuple[str, ...]:
        """``NGram.add_char`` over one normalised word (and the space after it)."""
        out = []
        grams, capital = " ", False
        for ch in word + " " if space_after else word:
            prev = grams[-1]
            if prev == " ":
                grams, capital = " ", False
                if ch == " ":
                    continue
            elif len(grams) >= 3:
                grams = grams[1:]
            grams += ch
            if ch.isupper():
                if prev.isupper():
                    capital = True
            else:
                capital = False
            if capital:
                continue
            for n in (1, 2, 3):
                if len(grams) < n:
                    break
                w = grams[-n:]
                if w and w != " " and w in index:
                    out.append(w)
        return tuple(out)

    class _FastDetector(Detector):
        """langdetect's ``Detector`` with a faster ``_extract_ngrams`` and ``_detect_block``.

        The n-gram extraction runs ``NGram.add_char``'s state machine once per distinct
        word (a space resets it), with the per-character normalisation cached. The detection loop makes the same random
        draws and the same float operations in the same order (element-wise products on
        numpy rows, the normalising sum taken with Python's ``sum`` as langdetect does),
        hence the same probabilities; tests/test_verify_if.py compares the two.
        """

        def _extract_ngrams(self):
            # Spaces reset NGram's buffer, so the n-grams of a text are those of its
            # space-separated pieces (in order), each computed once.
            pieces = "".join(map(normalize, self.text)).split(" ")
            last = len(pieces) - 1
            result = []
            for i, piece in enumerate(pieces):
                if piece:
                    result.extend(word_ngrams(piece, i < last))
            return result

        def _detect_block(self):
            import numpy as np

            self.cleaning_text()
            ngrams = self._extract_ngrams()
            if not ngrams:
                raise LangDetectException(ErrorCode.CantDetectError, "No features in text.")
            factory = _lang_factory()
            index, matrix, n = factory.word_lang_prob_map, factory.matrix, len(self.langlist)
            langprob = np.zeros(n)
            self.random.seed(self.seed)
            for _ in range(self.n_trial):
                prob = np.array(self.prior_map) if self.prior_map is not None else np.full(n, 1.0 / n)
                alpha = self.alpha + self.random.gauss(0.0, 1.0) * self.ALPHA_WIDTH
                weight = alpha / self.BASE_FREQ
                i = 0
                while True:
                    prob *= weight + matrix[index[self.random.choice(ngrams)]]
                    if i % 5 == 0:
                        sump = sum(prob.tolist())
                        if sump == 0.0:
                            raise ZeroDivisionError("float division by zero")  # as langdetect
                        prob /= sump
                        if max(0.0, prob.max()) > self.CONV_THRESHOLD or i >= self.ITERATION_LIMIT:
                            break
                    i += 1
                langprob += prob / self.n_trial
            self.langprob = langprob.tolist()

    return _FastDetector


@functools.lru_cache(maxsize=128)
def detect_language(text: str) -> str:
    """``langdetect.detect(text)`` with a fixed seed: same text, same answer, every run.

    Raises LangDetectException where langdetect does (e.g. text without letters).
    """
    detector = _detector_class()(_lang_factory())
    detector.append(text)
    return detector.detect()


_detector_class = functools.cache(_fast_detector_class)


def reset_rng(key: str) -> None:
    """Reseed RNG for one instruction (called by the evaluator before building it)."""
    RNG.seed(key)
