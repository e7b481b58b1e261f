"""
Contradiction between a claim and the evidence sentences it is aligned with, which similarity alone cannot see
("Keys do not expire" is as close to "Keys expire" as a paraphrase). The citation verifier's `contradictions`
settings configure it.

A claim contradicts an evidence sentence when
- its polarity differs: the negation cues (`negation_cues`: not, no, never, n't, without, fails to...) and opposite
  words (`antonyms`: increase/decrease, always/never, enable/disable...) that bear on the shared content, i.e. have a
  word of the other sentence within `cue_window` words, flip the meaning an odd number of times, counting both
  sentences (so "does not increase" agrees with "decreases"), or
- it states a number the cited passages do not contain while the evidence gives a different number of the same unit
  ("48 hours" against "24 hours").

Usage:
```python
from gatehouse.components.validators.contradiction import CONTRADICTION_DEFAULTS, ContradictionDetector

detector = ContradictionDetector(CONTRADICTION_DEFAULTS)
detector.cues("API keys never expire.", ["API keys expire after 90 days."], {"90"}, set())  # ["negation:never"]
detector.negated_words("What if I don't set a limit?")  # {"set", "limit"}: the question's premise
```
"""

import re
from typing import Any

from gatehouse.components.terms import content_words, stem

#: Words and phrases that negate what follows them; `n't` matches the contracted form ("doesn't", "can't").
DEFAULT_NEGATION_CUES: tuple[str, ...] = (
    "not", "no", "never", "n't", "cannot", "without", "none", "neither", "nor", "nothing", "fail to", "fails to",
    "failed to", "unable to", "lack", "lacks", "lacked", "absence of",
)

#: Pairs of opposite word groups; a sentence using one side where its evidence uses the other contradicts it.
DEFAULT_ANTONYMS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("always",), ("never",)),
    (("include", "included", "includes"), ("exclude", "excluded", "excludes")),
    (("increase", "increased", "increases", "higher", "more", "greater", "raise", "raises", "rise", "rises"),
     ("decrease", "decreased", "decreases", "lower", "less", "fewer", "reduce", "reduced", "reduces", "drop")),
    (("enable", "enabled", "enables"), ("disable", "disabled", "disables")),
    (("before",), ("after",)),
    (("required", "mandatory"), ("optional",)),
    (("allowed", "permitted"), ("forbidden", "prohibited")),
    (("minimum",), ("maximum",)),
)

#: The citation verifier's `contradictions` settings and their defaults: `enabled` (check claims at all),
#: `negation_cues` and `antonyms` (None: the lists above), `cue_window`, `alignment_top_k` (evidence sentences, the
#: best-matching first, a claim is checked against).
CONTRADICTION_DEFAULTS: dict[str, Any] = {
    "enabled": True, "negation_cues": None, "antonyms": None, "cue_window": 5, "alignment_top_k": 1,
}

_NUMBER_WITH_UNIT = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s*(%|[^\W\d_]+)?")
_CUE_TOKEN = re.compile(r"\w+?(?=n['’]t\b)|n['’]t\b|\w+", re.IGNORECASE)


class ContradictionDetector:
    """The cues by which a claim contradicts its aligned evidence (see the module documentation)."""

    def __init__(self, settings: dict[str, Any], stopwords: list[str] | None = None) -> None:
        """
        Compile the cue lists.

        :param settings: The `contradictions` settings (every key of `CONTRADICTION_DEFAULTS`; `enabled` is the
            caller's to read).
        :param stopwords: Words that are not content words; None uses the built-in English list.
        :raises ValueError: If an `antonyms` entry is not a pair of word lists.
        """
        self.cue_window = settings["cue_window"]
        self.alignment_top_k = settings["alignment_top_k"]
        self.stopwords = stopwords
        cues = DEFAULT_NEGATION_CUES if settings["negation_cues"] is None else settings["negation_cues"]
        self._negations = [tuple(_cue_tokens(cue)) for cue in cues if _cue_tokens(cue)]
        pairs = DEFAULT_ANTONYMS if settings["antonyms"] is None else settings["antonyms"]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError("Each entry of 'contradictions.antonyms' must be a pair of word lists, "
                             "[[increase, higher], [decrease, lower]].")
        self._antonyms = [({stem(w.lower()) for w in a}, {stem(w.lower()) for w in b}) for a, b in pairs]

    def cues(self, claim: str, aligned: list[str], available: set[str], premise: set[str]) -> list[str]:
        """
        The cues by which `claim` contradicts one of its `alignment_top_k` best-aligned evidence sentences.

        :param claim: The claim.
        :param aligned: Its evidence sentences, the best-matching first.
        :param available: The numbers the cited passages contain.
        :param premise: The words the question itself negates: negations on them count on neither side.
        :returns: `negation:<cue>`, `antonym:<word>/<opposite>` or `number:<n> <unit>` entries; empty when the claim
            contradicts none.
        """
        for sentence in aligned[: self.alignment_top_k]:
            flips = self._polarity_cues(claim, sentence, premise)
            if len(flips) % 2:
                return flips
            for number, unit in _numbers_with_units(claim):
                if number not in available and any(
                    u == unit and n != number for n, u in _numbers_with_units(sentence)
                ):
                    return [f"number:{number} {unit}"]
        return []

    def negated_words(self, question: str) -> set[str]:
        """The content words the question's own negations bear on ("if I don't pass any *limits*")."""
        tokens = _cue_tokens(question or "")
        return {word for start in range(len(tokens)) for cue in self._negations
                if tuple(tokens[start : start + len(cue)]) == cue
                for word in self._content(tokens[start + len(cue) : start + len(cue) + self.cue_window])}

    def _polarity_cues(self, claim: str, sentence: str, premise: set[str] | None = None) -> list[str]:
        """Negations (in either sentence) and opposite words that bear on the content the two sentences share."""
        claim_tokens, sentence_tokens = _cue_tokens(claim), _cue_tokens(sentence)
        cues = [f"negation:{cue}" for cue in self._negations_on(claim_tokens, sentence, premise)]
        cues += [f"negation:{cue}" for cue in self._negations_on(sentence_tokens, claim, premise)]
        claim_hits, sentence_hits = self._antonym_hits(claim_tokens), self._antonym_hits(sentence_tokens)
        for pair, side, word, context in claim_hits:
            near = [(s, w) for p, s, w, c in sentence_hits if p == pair and c & context]
            opposite = [w for s, w in near if s != side]
            if opposite and all(s != side for s, _ in near):
                cues.append(f"antonym:{word}/{opposite[0]}")
        return cues

    def _negations_on(self, tokens: list[str], other: str, premise: set[str] | None = None) -> list[str]:
        """
        The negation cues of `tokens` followed, within `cue_window` words, by a content word of `other`; a cue whose
        words are among `premise` (what the question itself negates) is left out.
        """
        shared = content_words(other, self.stopwords)
        found = []
        for start in range(len(tokens)):
            for cue in self._negations:
                end = start + len(cue)
                if tuple(tokens[start:end]) != cue:
                    continue
                window = self._content(tokens[end : end + self.cue_window])
                if window & shared and not (premise and window & premise):
                    found.append(" ".join(cue))
        return found

    def _antonym_hits(self, tokens: list[str]) -> list[tuple[int, int, str, set[str]]]:
        """`(pair, side, word, content words within cue_window on either side)` per opposite word in `tokens`;
        a word that is also a negation cue ("never") counts once, as a negation."""
        hits = []
        for position, token in enumerate(tokens):
            if (token,) in self._negations:
                continue
            stemmed = stem(token)
            for pair, (first, second) in enumerate(self._antonyms):
                for side, group in enumerate((first, second)):
                    if stemmed in group:
                        context = tokens[max(0, position - self.cue_window) : position] + tokens[
                            position + 1 : position + 1 + self.cue_window
                        ]
                        hits.append((pair, side, token, self._content(context)))
        return hits

    def _content(self, tokens: list[str]) -> set[str]:
        return content_words(" ".join(t for t in tokens if t != "n't"), self.stopwords)


def _cue_tokens(text: str) -> list[str]:
    """Lower-cased words with the contraction `n't` as a word of its own ("doesn't" -> "does", "n't")."""
    return [t.lower().replace("’", "'") for t in _CUE_TOKEN.findall(text or "")]


def _numbers_with_units(text: str) -> set[tuple[str, str]]:
    """The numbers of a text with the unit word that follows each (`("90", "days")`, `("5", "%")`); numbers
    without a unit are left out since nothing says what they count."""
    found = set()
    for match in _NUMBER_WITH_UNIT.finditer(text or ""):
        if match.group(2):
            found.add((match.group(1).replace(",", "").rstrip("."), stem(match.group(2).lower())))
    return found
