"""
The condenser's rules (plain Python, not a component): whether a question is a follow-up that leans on the
conversation, and its standalone form, found without a model from the noun phrases of the earlier user turns.

Usage:
```python
from gatehouse.components.query.followup_rules import FollowUpRules

rules = FollowUpRules()
rules.condense("and how do I revoke it?", [{"role": "user", "content": "How do I rotate an API key?"}])
# "how do I revoke an API key?"
```
"""

import re
from dataclasses import dataclass
from typing import Any

from gatehouse.components.setting_groups import setting_group
from gatehouse.components.terms import TermNormaliser, singular, tokenize

DEFAULT_FOLLOWUP_PATTERNS = [
    r"^\s*(and|but|also|or|so|then|plus)\b",
    r"^\s*(what|how)\s+about\b",
    r"^\s*what\s+if\b",
    r"^\s*(same|ditto)\b",
    r"\b(as well|too|instead)\s*[?.!]*\s*$",
]
DEFAULT_PRONOUNS = ["it", "this", "that", "these", "those", "they", "them"]
DEFAULT_NOUN_PRONOUNS = ["one", "ones"]
DEFAULT_LEADING_CONNECTIVES = ["and", "but", "also", "so", "then", "or", "plus"]
#: Words that open a reply to the last answer without adding to the question ("ok, and how do I ...?"): set aside
#: before the follow-up patterns are read, and dropped from the standalone question.
DEFAULT_INTERJECTIONS = ["ok", "okay", "alright", "right", "well", "great", "thanks", "cool", "oh", "hmm"]
_ELLIPSIS_TAIL = r"(?:\s+(?:too|instead|as well))?\s*[?.!]*\s*$"
_ELLIPSIS_PREPOSITION = r"(?P<prep>for|in|on|with|without|at|from|during|under|over|of)"
DEFAULT_ELLIPSIS_PATTERNS = [
    rf"^(?:what|how)\s+about\s+(?:{_ELLIPSIS_PREPOSITION}\s+)?(?P<entity>[^?.!]+?){_ELLIPSIS_TAIL}",
    rf"^{_ELLIPSIS_PREPOSITION}\s+(?P<entity>[^?.!]+?){_ELLIPSIS_TAIL}",
    rf"^(?P<entity>(?:the|a|an|my|our|your|their)\s+[^?.!]+?){_ELLIPSIS_TAIL}",
]
DEFAULT_DETERMINERS = [
    "a", "an", "the", "my", "our", "your", "their", "his", "her", "its", "this", "that", "these", "those", "each",
    "every", "any", "some", "no", "all",
]  # fmt: skip
DEFAULT_QUESTION_DETERMINERS = ["what", "which", "whose"]
DEFAULT_PREPOSITIONS = [
    "of", "for", "in", "on", "with", "about", "from", "by", "into", "per", "via", "without", "between", "under",
    "over", "at", "to", "during", "after", "before",
]  # fmt: skip
DEFAULT_AUXILIARY_VERBS = ["do", "does", "did", "can", "could", "will", "would", "should", "shall", "may", "might",
                           "must"]  # fmt: skip
DEFAULT_VERB_CUES = ["i", "we", "you", "to", "please"]
DEFAULT_CONTEXT_TEMPLATE = "Regarding {topic}, {question}"
_PLURAL_PRONOUNS = frozenset(["they", "them", "these", "those", "their"])
_WORD_RE = re.compile(r"[^\W_]+(?:['\u2019./_-][^\W_]+)*")  # "HTTP/2", "client.get" and "max_size" are one word
#: The English the rules read: every key of `FollowUpRules`' `grammar`, with its default.
DEFAULT_GRAMMAR: dict[str, Any] = {
    "followup_patterns": DEFAULT_FOLLOWUP_PATTERNS,
    "pronouns": DEFAULT_PRONOUNS,
    "noun_pronouns": DEFAULT_NOUN_PRONOUNS,
    "leading_connectives": DEFAULT_LEADING_CONNECTIVES,
    "interjections": DEFAULT_INTERJECTIONS,
    "ellipsis_patterns": DEFAULT_ELLIPSIS_PATTERNS,
    "determiners": DEFAULT_DETERMINERS,
    "question_determiners": DEFAULT_QUESTION_DETERMINERS,
    "prepositions": DEFAULT_PREPOSITIONS,
    "auxiliary_verbs": DEFAULT_AUXILIARY_VERBS,
    "verb_cues": DEFAULT_VERB_CUES,
    "definite_article": "the",
    "stopwords": None,
    "stemmer_language": "english",
}


@dataclass(frozen=True)
class _Token:
    start: int
    end: int
    lower: str
    broken: bool  # punctuation (or the start of the text) comes before it


@dataclass(frozen=True)
class _Phrase:
    """A noun phrase of a question: its words, how to mention it again, and the spans to replace."""

    text: str  # the content words ("API key")
    mention: str  # with its article ("an API key")
    end: int
    outer_start: int  # start of the determiner, else of the words
    prep_start: int  # start of the preposition before it, else `outer_start`
    determiner: str | None
    preposition: str | None
    head: str  # the stemmed last word


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    previous_end = None
    for match in _WORD_RE.finditer(text):
        gap = text[previous_end : match.start()] if previous_end is not None else ""
        tokens.append(
            _Token(match.start(), match.end(), match.group(0).casefold(), previous_end is None or bool(gap.strip()))
        )
        previous_end = match.end()
    return tokens


class FollowUpRules:
    """
    The rules of `QueryCondenser` (its docstring says what they do): `is_followup`, `noun_phrases` and `condense`.

    :param grammar: The English the rules read, keys of `DEFAULT_GRAMMAR` (a key left out or None keeps its
        default): `followup_patterns` (regexes marking a follow-up), `pronouns` (words replaced by the topic; this,
        that, these, those only when they stand alone), `noun_pronouns` (words standing for the topic's noun: "the
        last *one*"), `leading_connectives` (dropped from the start), `interjections` (set aside before
        the patterns are read, dropped from the start: "ok, and ..."), `ellipsis_patterns` (regexes naming a new
        entity in a group `entity`, optionally its preposition in `prep`), `determiners`, `question_determiners`
        (open the asked-about phrase, mentioned again with `definite_article`), `prepositions`, `auxiliary_verbs`
        (after "does <subject>" the last word is the verb), `verb_cues` (the next content word is a verb),
        `definite_article`, `stopwords` (None: Gatehouse's list), `stemmer_language` (None: exact words).
    :param max_history_turns: Most recent user turns looked at.
    :param use_assistant_turns: Take the topic from the last assistant turn first (when the history ends with one).
    :param max_condense_words: Longer questions are never follow-ups.
    :param max_reference_content_terms: A question with a pronoun and at most this many content terms is a
        follow-up.
    :param context_template: Standalone form of a follow-up without a pronoun or a new entity (`{topic}`,
        `{question}`).
    :raises ValueError: On an unknown `grammar` key or a negative `max_history_turns`.
    """

    def __init__(
        self,
        *,
        grammar: dict[str, Any] | None = None,
        max_history_turns: int = 2,
        use_assistant_turns: bool = False,
        max_condense_words: int = 12,
        max_reference_content_terms: int = 3,
        context_template: str = DEFAULT_CONTEXT_TEMPLATE,
    ) -> None:
        if max_history_turns < 0:
            raise ValueError("max_history_turns must be >= 0.")
        settings = setting_group("grammar", grammar, DEFAULT_GRAMMAR)
        given = {key: DEFAULT_GRAMMAR[key] if value is None else value for key, value in settings.items()}
        self.max_history_turns = max_history_turns
        self.use_assistant_turns = use_assistant_turns
        self.max_condense_words = max_condense_words
        self.max_reference_content_terms = max_reference_content_terms
        self.context_template = context_template
        self._definite_article = given["definite_article"]
        self._terms = TermNormaliser(settings["stopwords"], settings["stemmer_language"], 2)

        def words(key: str) -> frozenset[str]:
            return frozenset(w.casefold() for w in given[key])

        def patterns(key: str) -> list[re.Pattern[str]]:
            return [re.compile(p, re.IGNORECASE) for p in given[key]]

        self._followup = patterns("followup_patterns")
        self._ellipsis = patterns("ellipsis_patterns")
        self._noun_pronouns = words("noun_pronouns")
        self._pronouns = words("pronouns") | self._noun_pronouns
        self._question_determiners = words("question_determiners")
        self._determiners = words("determiners") | self._question_determiners
        self._prepositions = words("prepositions")
        self._auxiliaries = words("auxiliary_verbs")
        self._verb_cues = words("verb_cues")
        connectives = "|".join(re.escape(c) for c in given["leading_connectives"]) or "(?!)"
        interjections = "|".join(re.escape(w) for w in given["interjections"]) or "(?!)"
        self._interjection = re.compile(rf"^\s*(?:(?:{interjections})(?=[\s,.!])[\s,.!]*)+", re.IGNORECASE)
        self._connective = re.compile(rf"^(?:{connectives})\b[\s,]*", re.IGNORECASE)

    def is_followup(self, question: str) -> bool:
        """
        Whether a question leans on the conversation (deterministic rules).

        :param question: The question.
        :returns: True for a short follow-up (a follow-up pattern, a pronoun with few content terms, or no content
            terms at all).
        """
        words = question.split()
        if not words or len(words) > self.max_condense_words:
            return False
        content = [t for t in tokenize(question) if self._terms.is_content(t)]
        if not content:
            return True
        if any(p.search(self._without_interjection(question)) for p in self._followup):
            return True
        pronouns = [t for t in tokenize(question) if t in self._pronouns]
        return len(content) <= self.max_reference_content_terms and bool(pronouns)

    def noun_phrases(self, text: str, *, opens_with_verb: bool = True) -> list[_Phrase]:
        """
        The noun phrases of a question, found by rules (no tagger): runs of content words, without the verb that
        follows a subject pronoun or `to` ("do I *rotate* an API key") or opens the sentence ("*Compare* the
        plans"), and without the main verb after an auxiliary's subject ("does the basic tier *cost*").

        :param text: A question.
        :param opens_with_verb: Whether a run of content words at the start is taken to open with a verb (a
            question or a request); False for a bare phrase such as "premium tier".
        :returns: The phrases in text order.
        """
        tokens = _tokens(text)
        function_words = self._determiners | self._prepositions | self._auxiliaries
        in_phrase = [self._terms.is_content(t.lower) and t.lower not in function_words for t in tokens]
        phrases: list[_Phrase] = []
        index = 0
        while index < len(tokens):
            if not in_phrase[index]:
                index += 1
                continue
            first = index
            while index + 1 < len(tokens) and not tokens[index + 1].broken and in_phrase[index + 1]:
                index += 1
            last = index
            index += 1
            previous = tokens[first - 1] if first > 0 and not tokens[first].broken else None
            if (previous is None and opens_with_verb) or (previous is not None and previous.lower in self._verb_cues):
                first += 1  # the run opens with a verb
            if first > last:
                continue
            cursor = first - 1
            while cursor >= 0 and tokens[cursor].lower in self._determiners and not tokens[cursor + 1].broken:
                cursor -= 1
            after_auxiliary = (
                cursor >= 0 and not tokens[cursor + 1].broken and tokens[cursor].lower in self._auxiliaries
            )
            if after_auxiliary and last > first:
                last -= 1  # "does the basic tier cost": the last word is the main verb
            if first > last:
                continue
            determiner = preposition = None
            outer = tokens[first].start
            before = first - 1
            if before >= 0 and not tokens[first].broken and tokens[before].lower in self._determiners:
                determiner = tokens[before].lower
                outer = tokens[before].start
                before -= 1
            if before >= 0 and not tokens[before + 1].broken and tokens[before].lower in self._prepositions:
                preposition = tokens[before].lower
            mention = text[outer : tokens[last].end]
            phrases.append(
                _Phrase(
                    text=text[tokens[first].start : tokens[last].end],
                    mention=mention[:1].lower() + mention[1:] if determiner else mention,
                    end=tokens[last].end,
                    outer_start=outer,
                    prep_start=tokens[before].start if preposition else outer,
                    determiner=determiner,
                    preposition=preposition,
                    head=self._terms.stem(tokens[last].lower),
                )
            )
        return phrases

    def _topic(self, phrases: list[_Phrase]) -> _Phrase:
        """
        The phrase a pronoun refers to: the asked-about one ("which *regions*"), else a name written like an identifier
        ("*HTTP/2*", "*Client.get*": capitals after the first letter, digits, dots or slashes), else the first marked
        one (with an article or a preposition).
        """
        asked = [p for p in phrases if p.determiner in self._question_determiners]
        named = [p for p in phrases if re.search(r"[./\d]|\w[A-Z]", p.text)]
        marked = [p for p in phrases if p.determiner or p.preposition]
        return (asked or named or marked or phrases)[0]

    def _pointed_at(self, question: str, phrases: list[_Phrase]) -> _Phrase | None:
        """The phrase a demonstrative of the question points at ("that *proxy*" after "through a proxy"), or None."""
        tokens = _tokens(question)
        for token, following in zip(tokens, tokens[1:]):
            if token.lower in self._pronouns and token.lower in self._determiners and not following.broken:
                head = self._terms.stem(following.lower)
                pointed = next((p for p in phrases if p.head == head), None)
                if pointed is not None:
                    return pointed
        return None

    def _mention(self, phrase: _Phrase) -> str:
        """How a phrase is mentioned again: with its article, or `the` after a question word."""
        if phrase.determiner in self._question_determiners:
            return f"{self._definite_article} {phrase.text}".strip()
        return phrase.mention

    def _resolve_pronoun(self, question: str, topic: _Phrase, topic_text: str) -> str | None:
        """The question with its first pronoun replaced by the topic, or None when it has none."""
        tokens = _tokens(question)
        for position, token in enumerate(tokens):
            if token.lower not in self._pronouns:
                continue
            if token.lower in _PLURAL_PRONOUNS and any(
                    t.lower.endswith("s") and self._terms.is_content(t.lower) and t.lower not in self._pronouns
                    for t in tokens[:position]):
                continue  # "how long do idle connections live before they expire": its own plural noun
            previous = tokens[position - 1] if position > 0 and not token.broken else None
            following = tokens[position + 1] if position + 1 < len(tokens) and not tokens[position + 1].broken else None
            start, end, replacement = token.start, token.end, topic_text
            if token.lower in self._noun_pronouns:
                if previous is not None and previous.lower in self._auxiliaries:
                    continue  # "how can one ...": a generic subject
                if following is not None and self._terms.is_content(following.lower):
                    continue  # "in one go", "for one request": a number before its noun
                before = tokens[position - 2] if previous is not None and not previous.broken else None
                modified = previous is not None and (
                    previous.lower in self._determiners
                    or (before is not None and before.lower in self._determiners)
                )
                if modified:  # "the last one", "which one": only the noun is replaced
                    replacement = singular(topic.text.split()[-1])
            elif token.lower in self._determiners and following is not None and self._terms.is_content(following.lower):
                if self._terms.stem(following.lower) == topic.head:
                    end = following.end  # "that tier" -> "the basic tier"
                elif previous is None or previous.lower not in self._auxiliaries:
                    continue  # a determiner of something else ("that region")
            return question[:start] + replacement + question[end:]
        return None

    def _resolve_ellipsis(self, question: str, previous: str, phrases: list[_Phrase]) -> str | None:
        """
        The previous question with the follow-up's new entity in place of the matching phrase ("what about the
        premium tier?" after "How much does the basic tier cost?" -> "How much does the premium tier cost?").

        :returns: The standalone question, or None when the follow-up names no new entity or no phrase of the
            previous question can take its place.
        """
        for pattern in self._ellipsis:
            match = pattern.search(question)
            if not match or not match.groupdict().get("entity"):
                continue
            entity = match.group("entity").strip()
            entity_phrases = self.noun_phrases(entity, opens_with_verb=False)
            if not entity_phrases or any(t.lower in self._pronouns for t in _tokens(entity)):
                return None
            if entity_phrases[0].determiner:
                entity = entity[:1].lower() + entity[1:]
            head = entity_phrases[0].head
            for phrase in phrases:
                if phrase.head == head:
                    return previous[: phrase.outer_start] + entity + previous[phrase.end :]
            preposition = (match.groupdict().get("prep") or "").strip()
            with_preposition = [p for p in phrases if p.preposition]
            if preposition and with_preposition:
                phrase = with_preposition[-1]
                return previous[: phrase.prep_start] + f"{preposition} {entity}" + previous[phrase.end :]
            return None
        return None

    def _without_interjection(self, question: str) -> str:
        """The question without a leading "ok,", "thanks," ... (unchanged when nothing else is left)."""
        rest = self._interjection.sub("", question, count=1)
        return rest if rest.strip() else question

    def _strip_connective(self, question: str) -> str:
        """The question without a leading "ok,", "and", "so", ... (keeping its initial capital)."""
        stripped = self._without_interjection(question).strip()
        match = self._connective.match(stripped)
        if not match or not stripped[match.end() :].strip():
            return stripped
        rest = stripped[match.end() :].lstrip()
        return rest[:1].upper() + rest[1:] if stripped[:1].isupper() else rest

    def condense(self, question: str, history: list[dict[str, Any]]) -> str:
        """
        The standalone form of a follow-up question (rules only); other questions come back unchanged.

        Earlier follow-ups in the history are made standalone first, so a chain of follow-ups keeps its topic.

        :param question: The question.
        :param history: Earlier turns, `{"role": "user" | "assistant", "content": str}`.
        :returns: E.g. "how do I revoke an API key?" for "and how do I revoke it?" after "How do I rotate an API
            key?".
        """
        if not question.strip() or not self.is_followup(question):
            return question
        users = [str(t.get("content") or "") for t in history if t.get("role") == "user" and t.get("content")]
        recent = users[-self.max_history_turns :] if self.max_history_turns else []
        resolved: list[str] = []
        for turn in recent:
            earlier = [{"role": "user", "content": resolved[-1]}] if resolved else []
            resolved.append(self.condense(turn, earlier) if earlier else turn)
        sources = list(reversed(resolved))
        if self.use_assistant_turns and history and history[-1].get("role") == "assistant":
            sources.insert(0, str(history[-1].get("content") or ""))
        found = [phrases for phrases in map(self.noun_phrases, sources) if phrases]
        if not found:
            return question
        body = self._strip_connective(question)
        topic = self._pointed_at(body, [p for phrases in found for p in phrases]) or self._topic(found[0])
        previous = resolved[-1] if resolved else ""
        ellipsis = self._resolve_ellipsis(body, previous, self.noun_phrases(previous)) if previous else None
        if ellipsis is not None:
            return ellipsis
        if {self._terms.stem(w) for w in tokenize(topic.text) if self._terms.is_content(w)} <= set(
            self._terms.terms(body)
        ):
            return question  # the topic is named already
        resolved_pronoun = self._resolve_pronoun(body, topic, self._mention(topic))
        if resolved_pronoun is not None:
            return resolved_pronoun
        return self._in_context(body, topic)

    def names_a_subject(self, question: str) -> bool:
        """Whether a question names something of its own: a phrase other than the one it asks about ("which *X*")."""
        return any(p.determiner not in self._question_determiners for p in self.noun_phrases(question))

    def in_context(self, question: str, earlier: str) -> str:
        """
        A question put in context with the topic of an earlier one (`context_template`), whether it leans on it or
        not ("How accurate is it?" after "How much memory does a sketch use?" -> "Regarding sketch, how accurate is
        it?"); unchanged when the earlier question has no noun phrase.

        :param question: The question.
        :param earlier: The earlier question whose topic is the context.
        """
        phrases = self.noun_phrases(earlier)
        return self._in_context(self._strip_connective(question), self._topic(phrases)) if phrases else question

    def _in_context(self, body: str, topic: _Phrase) -> str:
        """`context_template` filled with the topic and the question (its first word lowered inside the template)."""
        first, _, rest = body.partition(" ")
        inside = not self.context_template.lstrip().startswith("{question}")
        if inside and first[1:].islower() and first != "I":
            body = f"{first[:1].lower()}{first[1:]} {rest}".strip()
        return self.context_template.replace("{topic}", topic.text).replace("{question}", body)
