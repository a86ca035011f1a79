# Natural Language Toolkit: Punkt sentence tokenizer, NLTK's word tokenizer,
# averaged perceptron tagger (inference parts only)
#
# Punkt and NLTKWordTokenizer:
#   Copyright (C) 2001-2026 NLTK Project
#   Punkt algorithm: Kiss & Strunk (2006)
#   Punkt authors: Willy, Steven Bird, Edward Loper, Joel Nothman, Arthur Darcet, Tom Aarsen
#   NLTKWordTokenizer authors: Liling Tan, Tom Aarsen
#   Licensed under the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0).
# Averaged perceptron tagger:
#   Copyright 2013 Matthew Honnibal; NLTK modifications Copyright 2015 The NLTK Project
#   (Long Duong). Provided under the terms of the MIT License:
#   Permission is hereby granted, free of charge, to any person obtaining a copy of this
#   software and associated documentation files (the "Software"), to deal in the Software
#   without restriction, including without limitation the rights to use, copy, modify,
#   merge, publish, distribute, sublicense, and/or sell copies of the Software, and to
#   permit persons to whom the Software is furnished to do so, subject to the following
#   conditions: The above copyright notice and this permission notice shall be included in
#   all copies or substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS IS",
#   WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.
#
# Modified for rlvr: see the docstring below.

"""The three NLTK algorithms the IF checkers use, ported from NLTK 3.10.4.

- ``PunktSentenceTokenizer`` (``nltk/tokenize/punkt.py``): sentence splitting with a
  pre-trained model, i.e. what ``nltk.sent_tokenize`` does;
- ``NLTKWordTokenizer`` (``nltk/tokenize/destructive.py``): the Treebank-style word
  tokenizer ``nltk.word_tokenize`` applies to each sentence;
- ``PerceptronTagger`` (``nltk/tag/perceptron.py``): ``nltk.pos_tag``'s tagger.

Only inference is kept (no training, pickling, debugging or span alignment), the model
parameters are passed in rather than found on NLTK's data path, and the regular
expressions use Python's ``re`` (NLTK 3.10 routes them through the ``regex`` package with
a wall-clock timeout, which makes a slow match a time-dependent error). The algorithms
are otherwise NLTK's, line for line. Why not import NLTK: ``import nltk`` costs 0.3-1.5 s
(it imports scipy when present) in every verifier worker, and NLTK's tokenizers have
changed between releases (3.10 added curly quotes to Punkt's boundary rules), so a pinned
copy keeps verdicts identical across installs. tests/test_verify_if.py checks this port
against the installed NLTK and against stored NLTK results on the IFEval responses.
"""

from __future__ import annotations

import re
import string
from collections import defaultdict

# ---------------------------------------------------------------------------
# Punkt (nltk/tokenize/punkt.py)
# ---------------------------------------------------------------------------

_ORTHO_BEG_UC = 1 << 1
_ORTHO_MID_UC = 1 << 2
_ORTHO_UNK_UC = 1 << 3
_ORTHO_BEG_LC = 1 << 4
_ORTHO_MID_LC = 1 << 5
_ORTHO_UNK_LC = 1 << 6
_ORTHO_UC = _ORTHO_BEG_UC + _ORTHO_MID_UC + _ORTHO_UNK_UC
_ORTHO_LC = _ORTHO_BEG_LC + _ORTHO_MID_LC + _ORTHO_UNK_LC


class PunktLanguageVars:
    """The language-dependent regular expressions of Punkt (English defaults)."""

    sent_end_chars = (".", "?", "!")
    internal_punctuation = ",:;"
    re_boundary_realignment = re.compile(
        r'["\')\]}\u2018\u2019\u201c\u201d\xab\xbb]+?(?:\s+|(?=--)|$)', re.MULTILINE
    )
    _re_word_start = r"[^\(\"\`{\[:;&\#\*@\)}\]\-,]"
    _re_multi_char_punct = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)"
    _word_tokenize_fmt = r"""(
        %(MultiChar)s
        |
        (?=%(WordStart)s)\S+?  # Accept word characters until end is found
        (?= # Sequences marking a word's end
            \s|                                 # White-space
            $|                                  # End-of-string
            %(NonWord)s|%(MultiChar)s|          # Punctuation
            ,(?=$|\s|%(NonWord)s|%(MultiChar)s) # Comma if at end of word
        )
        |
        \S
    )"""
    _period_context_fmt = r"""
        %(SentEndChars)s             # a potential sentence ending
        (?=(?P<after_tok>
            %(NonWord)s              # either other punctuation
            |
            \s+(?P<next_tok>\S+)     # or whitespace and some other token
        ))"""

    def __init__(self):
        sent_end = "[%s]" % re.escape("".join(self.sent_end_chars))
        non_word = r"(?:[)\";}\]\*:@\'\({\[\u2018\u2019\u201c\u201d\xab\xbb%s])" % re.escape(
            "".join(sorted(set(self.sent_end_chars) - {"."}))
        )
        self._re_word_tokenizer = re.compile(
            self._word_tokenize_fmt
            % {"NonWord": non_word, "MultiChar": self._re_multi_char_punct, "WordStart": self._re_word_start},
            re.UNICODE | re.VERBOSE,
        )
        self._re_period_context = re.compile(
            self._period_context_fmt % {"NonWord": non_word, "SentEndChars": sent_end},
            re.UNICODE | re.VERBOSE,
        )

    def word_tokenize(self, s):
        return self._re_word_tokenizer.findall(s)

    def period_context_re(self):
        return self._re_period_context


_re_non_punct = re.compile(r"[^\W\d]", re.UNICODE)


def _pair_iter(iterator):
    iterator = iter(iterator)
    try:
        prev = next(iterator)
    except StopIteration:
        return
    for el in iterator:
        yield (prev, el)
        prev = el
    yield (prev, None)


class PunktParameters:
    """A Punkt model: abbreviations, collocations, sentence starters, orthographic contexts."""

    def __init__(self, abbrev_types=(), collocations=(), sent_starters=(), ortho_context=None):
        self.abbrev_types = set(abbrev_types)
        self.collocations = set(collocations)
        self.sent_starters = set(sent_starters)
        self.ortho_context = defaultdict(int, ortho_context or {})


class PunktToken:
    _properties = ["parastart", "linestart", "sentbreak", "abbr", "ellipsis"]
    __slots__ = ["tok", "type", "period_final"] + _properties

    _RE_ELLIPSIS = re.compile(r"\.\.+$")
    _RE_NUMERIC = re.compile(r"^-?[\.,]?\d[\d,\.-]*\.?$")
    _RE_INITIAL = re.compile(r"[^\W\d]\.$", re.UNICODE)
    _RE_ALPHA = re.compile(r"[^\W\d]+$", re.UNICODE)

    def __init__(self, tok, parastart=None, linestart=None):
        self.tok = tok
        self.type = self._RE_NUMERIC.sub("##number##", tok.lower())
        self.period_final = tok.endswith(".")
        self.parastart = parastart
        self.linestart = linestart
        self.sentbreak = None
        self.abbr = None
        self.ellipsis = None

    @property
    def type_no_period(self):
        if len(self.type) > 1 and self.type[-1] == ".":
            return self.type[:-1]
        return self.type

    @property
    def type_no_sentperiod(self):
        if self.sentbreak:
            return self.type_no_period
        return self.type

    @property
    def first_upper(self):
        return self.tok[0].isupper()

    @property
    def first_lower(self):
        return self.tok[0].islower()

    @property
    def is_ellipsis(self):
        return self._RE_ELLIPSIS.match(self.tok)

    @property
    def is_initial(self):
        return self._RE_INITIAL.match(self.tok)


class PunktSentenceTokenizer:
    """Punkt sentence boundary detection with given parameters (inference only)."""

    PUNCTUATION = tuple(";:,.!?")

    def __init__(self, params: PunktParameters, lang_vars: PunktLanguageVars | None = None):
        self._params = params
        self._lang_vars = lang_vars or PunktLanguageVars()

    def tokenize(self, text: str, realign_boundaries: bool = True) -> list[str]:
        return [text[s:e] for s, e in self.span_tokenize(text, realign_boundaries)]

    def span_tokenize(self, text: str, realign_boundaries: bool = True):
        slices = self._slices_from_text(text)
        if realign_boundaries:
            slices = self._realign_boundaries(text, slices)
        for sentence in slices:
            yield (sentence.start, sentence.stop)

    def _get_last_whitespace_index(self, text: str) -> int:
        for i in range(len(text) - 1, -1, -1):
            if text[i] in string.whitespace:
                return i
        return 0

    def _match_potential_end_contexts(self, text: str):
        previous_slice = slice(0, 0)
        previous_match = None
        for match in self._lang_vars.period_context_re().finditer(text):
            before_text = text[previous_slice.stop : match.start()]
            index_after_last_space = self._get_last_whitespace_index(before_text)
            if index_after_last_space:
                index_after_last_space += previous_slice.stop + 1
            else:
                index_after_last_space = previous_slice.start
            prev_word_slice = slice(index_after_last_space, match.start())
            if previous_match and previous_slice.stop <= prev_word_slice.start:
                yield (
                    previous_match,
                    text[previous_slice] + previous_match.group() + previous_match.group("after_tok"),
                )
            previous_match = match
            previous_slice = prev_word_slice
        if previous_match:
            yield (
                previous_match,
                text[previous_slice] + previous_match.group() + previous_match.group("after_tok"),
            )

    def _slices_from_text(self, text: str):
        last_break = 0
        for match, context in self._match_potential_end_contexts(text):
            if self.text_contains_sentbreak(context):
                yield slice(last_break, match.end())
                if match.group("next_tok"):
                    last_break = match.start("next_tok")
                else:
                    last_break = match.end()
        yield slice(last_break, len(text.rstrip()))

    def _realign_boundaries(self, text: str, slices):
        realign = 0
        for sentence1, sentence2 in _pair_iter(slices):
            sentence1 = slice(sentence1.start + realign, sentence1.stop)
            if not sentence2:
                if text[sentence1]:
                    yield sentence1
                continue
            m = self._lang_vars.re_boundary_realignment.match(text[sentence2])
            if m:
                yield slice(sentence1.start, sentence2.start + len(m.group(0).rstrip()))
                realign = m.end()
            else:
                realign = 0
                if text[sentence1]:
                    yield sentence1

    def text_contains_sentbreak(self, text: str) -> bool:
        found = False
        for tok in self._annotate_tokens(self._tokenize_words(text)):
            if found:
                return True
            if tok.sentbreak:
                found = True
        return False

    def _tokenize_words(self, plaintext):
        parastart = False
        for line in plaintext.split("\n"):
            if line.strip():
                line_toks = iter(self._lang_vars.word_tokenize(line))
                try:
                    tok = next(line_toks)
                except StopIteration:
                    continue
                yield PunktToken(tok, parastart=parastart, linestart=True)
                parastart = False
                for tok in line_toks:
                    yield PunktToken(tok)
            else:
                parastart = True

    def _annotate_tokens(self, tokens):
        tokens = self._annotate_first_pass(tokens)
        return self._annotate_second_pass(tokens)

    def _annotate_first_pass(self, tokens):
        for aug_tok in tokens:
            self._first_pass_annotation(aug_tok)
            yield aug_tok

    def _first_pass_annotation(self, aug_tok: PunktToken) -> None:
        tok = aug_tok.tok
        if tok in self._lang_vars.sent_end_chars:
            aug_tok.sentbreak = True
        elif aug_tok.is_ellipsis:
            aug_tok.ellipsis = True
        elif aug_tok.period_final and not tok.endswith(".."):
            if (
                tok[:-1].lower() in self._params.abbrev_types
                or tok[:-1].lower().split("-")[-1] in self._params.abbrev_types
            ):
                aug_tok.abbr = True
            else:
                aug_tok.sentbreak = True

    def _annotate_second_pass(self, tokens):
        for token1, token2 in _pair_iter(tokens):
            self._second_pass_annotation(token1, token2)
            yield token1

    def _second_pass_annotation(self, aug_tok1: PunktToken, aug_tok2: PunktToken | None) -> None:
        if not aug_tok2:
            return
        if not aug_tok1.period_final:
            return
        typ = aug_tok1.type_no_period
        next_typ = aug_tok2.type_no_sentperiod
        tok_is_initial = aug_tok1.is_initial

        # Collocation heuristic (Kiss & Strunk 4.1.2).
        if (typ, next_typ) in self._params.collocations:
            aug_tok1.sentbreak = False
            aug_tok1.abbr = True
            return
        # Abbreviations and ellipses that are also sentence breaks (4.2).
        if (aug_tok1.abbr or aug_tok1.ellipsis) and (not tok_is_initial):
            is_sent_starter = self._ortho_heuristic(aug_tok2)
            if is_sent_starter == True:  # noqa: E712
                aug_tok1.sentbreak = True
                return
            if aug_tok2.first_upper and next_typ in self._params.sent_starters:
                aug_tok1.sentbreak = True
                return
        # Initials and ordinals (4.3).
        if tok_is_initial or typ == "##number##":
            is_sent_starter = self._ortho_heuristic(aug_tok2)
            if is_sent_starter == False:  # noqa: E712
                aug_tok1.sentbreak = False
                aug_tok1.abbr = True
                return
            if (
                is_sent_starter == "unknown"
                and tok_is_initial
                and aug_tok2.first_upper
                and not (self._params.ortho_context[next_typ] & _ORTHO_LC)
            ):
                aug_tok1.sentbreak = False
                aug_tok1.abbr = True
                return

    def _ortho_heuristic(self, aug_tok: PunktToken):
        if aug_tok.tok in self.PUNCTUATION:
            return False
        ortho_context = self._params.ortho_context[aug_tok.type_no_sentperiod]
        if aug_tok.first_upper and (ortho_context & _ORTHO_LC) and not (ortho_context & _ORTHO_MID_UC):
            return True
        if aug_tok.first_lower and ((ortho_context & _ORTHO_UC) or not (ortho_context & _ORTHO_BEG_LC)):
            return False
        return "unknown"


# ---------------------------------------------------------------------------
# NLTKWordTokenizer (nltk/tokenize/destructive.py)
# ---------------------------------------------------------------------------


class NLTKWordTokenizer:
    """NLTK's improved Treebank word tokenizer (``tokenize`` only, no PTB brackets)."""

    STARTING_QUOTES = [
        (re.compile("([«“‘„]|[`]+)", re.U), r" \1 "),
        (re.compile(r"^\""), r"``"),
        (re.compile(r"(``)"), r" \1 "),
        (re.compile(r"([ \(\[{<])(\"|\'{2})"), r"\1 `` "),
        (re.compile(r"(?i)(?<!\w)(\')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", re.U), r"\1 "),
    ]
    ENDING_QUOTES = [
        (re.compile("([»”’])", re.U), r" \1 "),
        (re.compile(r"''"), " '' "),
        (re.compile(r'"'), " '' "),
        (re.compile(r"\s+"), " "),
        (re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "), r"\1 \2 "),
        (re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
    ]
    PUNCTUATION = [
        (re.compile(r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*+)\s*$", re.U), r"\1 \2 \3 "),
        (re.compile(r"([:,])([^\d])"), r" \1 \2"),
        (re.compile(r"([:,])$"), r" \1 "),
        (re.compile(r"\.{2,}", re.U), r" \g<0> "),
        (re.compile(r"[;@#$%&]"), r" \g<0> "),
        (re.compile(r"[\u2012-\u2015]", re.UNICODE), r" \g<0> "),
        (re.compile(r'([^\.])(\.)([\]\)}>"\']*)\s*$'), r"\1 \2\3 "),
        (re.compile(r"[?!]"), r" \g<0> "),
        (re.compile(r"([^'])' "), r"\1 ' "),
        (re.compile(r"[*]", re.U), r" \g<0> "),
    ]
    PARENS_BRACKETS = (re.compile(r"[\]\[\(\)\{\}\<\>]"), r" \g<0> ")
    DOUBLE_DASHES = (re.compile(r"--"), r" -- ")
    # MacIntyre's contractions.
    CONTRACTIONS2 = [re.compile(p) for p in (
        r"(?i)\b(can)(?#X)(not)\b",
        r"(?i)\b(d)(?#X)('ye)\b",
        r"(?i)\b(gim)(?#X)(me)\b",
        r"(?i)\b(gon)(?#X)(na)\b",
        r"(?i)\b(got)(?#X)(ta)\b",
        r"(?i)\b(lem)(?#X)(me)\b",
        r"(?i)\b(more)(?#X)('n)\b",
        r"(?i)\b(wan)(?#X)(na)(?=\s)",
    )]
    CONTRACTIONS3 = [re.compile(p) for p in (r"(?i) ('t)(?#X)(is)\b", r"(?i) ('t)(?#X)(was)\b")]

    def tokenize(self, text: str) -> list[str]:
        for regexp, substitution in self.STARTING_QUOTES:
            text = regexp.sub(substitution, text)
        for regexp, substitution in self.PUNCTUATION:
            text = regexp.sub(substitution, text)
        regexp, substitution = self.PARENS_BRACKETS
        text = regexp.sub(substitution, text)
        regexp, substitution = self.DOUBLE_DASHES
        text = regexp.sub(substitution, text)
        text = " " + text + " "
        for regexp, substitution in self.ENDING_QUOTES:
            text = regexp.sub(substitution, text)
        for regexp in self.CONTRACTIONS2:
            text = regexp.sub(r" \1 \2 ", text)
        for regexp in self.CONTRACTIONS3:
            text = regexp.sub(r" \1 \2 ", text)
        return text.split()


# ---------------------------------------------------------------------------
# Averaged perceptron tagger (nltk/tag/perceptron.py; MIT, see the header)
# ---------------------------------------------------------------------------


class PerceptronTagger:
    """Greedy averaged-perceptron POS tagger with a given model (``tag`` only)."""

    START = ["-START-", "-START2-"]
    END = ["-END-", "-END2-"]

    def __init__(self, weights: dict, tagdict: dict, classes):
        self.weights = weights
        self.tagdict = tagdict
        self.classes = set(classes)

    def tag(self, tokens: list[str]) -> list[tuple[str, str]]:
        prev, prev2 = self.START
        output = []
        context = self.START + [self.normalize(w) for w in tokens] + self.END
        for i, word in enumerate(tokens):
            tag = self.tagdict.get(word)
            if not tag:
                tag = self._predict(self._get_features(i, word, context, prev, prev2))
            output.append((word, tag))
            prev2 = prev
            prev = tag
        return output

    def _predict(self, features: dict) -> str:
        scores = defaultdict(float)
        for feat, value in features.items():
            if feat not in self.weights or value == 0:
                continue
            for label, weight in self.weights[feat].items():
                scores[label] += value * weight
        # A secondary alphabetic sort, for stability.
        return max(self.classes, key=lambda label: (scores[label], label))

    @staticmethod
    def normalize(word: str) -> str:
        if "-" in word and word[0] != "-":
            return "!HYPHEN"
        if word.isdigit() and len(word) == 4:
            return "!YEAR"
        if word and word[0].isdigit():
            return "!DIGITS"
        return word.lower()

    def _get_features(self, i, word, context, prev, prev2) -> dict:
        features: dict = defaultdict(int)

        def add(name, *args):
            features[" ".join((name,) + tuple(args))] += 1

        i += len(self.START)
        add("bias")
        add("i suffix", word[-3:])
        add("i pref1", word[0] if word else "")
        add("i-1 tag", prev)
        add("i-2 tag", prev2)
        add("i tag+i-2 tag", prev, prev2)
        add("i word", context[i])
        add("i-1 tag+i word", prev, context[i])
        add("i-1 word", context[i - 1])
        add("i-1 suffix", context[i - 1][-3:])
        add("i-2 word", context[i - 2])
        add("i+1 word", context[i + 1])
        add("i+1 suffix", context[i + 1][-3:])
        add("i+2 word", context[i + 2])
        return features
