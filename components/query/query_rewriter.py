"""
Query rewriting: the retry rewrite of the quality loop, and condensation of conversational follow-ups.

Both tasks are deterministic by default; an LLM tier is optional and falls back to the deterministic result.
"""

import math
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from haystack import Document, component

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.kb_profile import KBProfiles
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.terms import TermNormaliser, singular, tokenize

TASKS = ("retry", "condense")
STRATEGIES = ("keywords", "feedback")

DEFAULT_REWRITE_PROMPT = (
    "The previous search did not find relevant documents. Rewrite the question into a more specific search "
    "query. Keep the original intent, add domain keywords where useful, and do not repeat an earlier query.\n"
    "Question: {question}\n"
    "Earlier queries: {previous_queries}\n"
    "Domain keywords: {keywords}\n"
    "Terms from the weak results: {feedback_terms}\n"
    "Output ONLY the rewritten query."
)

DEFAULT_CONDENSE_PROMPT = (
    "Given the conversation so far and a follow-up question, rewrite the follow-up into a standalone search "
    "query that can be understood without the conversation. Output ONLY the standalone query.\n"
    "Conversation:\n{history}\n"
    "Follow-up question: {question}"
)

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


def _same_query(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        line = re.sub(r"^\s*(standalone\s+query|rewritten\s+query|query|search\s+query)\s*:\s*", "", line, flags=re.I)
        line = line.strip().strip("\"'`").strip()
        if line:
            return line
    return ""


@component
class QueryRewriter(ChatGeneratorSerialization):
    """
    Rewrites the query: `task="retry"` for the next retrieval attempt, `task="condense"` for follow-up questions.

    **retry** (after the quality gate's `retry` route; `state["attempt"]` is already the new attempt number):
    the new query is always the original question (`condensed_query` when the condenser made it standalone, else
    `original_query`) plus expansion terms, never a rewrite of a rewrite, and `original_query` is never changed. Strategies are cumulative, in the order of `strategies`:
    attempt 1 adds the KB keywords (`kb_keywords` of `state["kbs"]` most similar to the question by embedding,
    at most `max_expansion_terms`, at least `min_keyword_similarity`); attempt 2 adds pseudo-relevance-feedback
    terms as well (tf-idf over the `prf_top_k` weak documents of the last attempt, without stopwords and question
    terms, at most `prf_terms`); later attempts take one more term of each. If a query would repeat an earlier
    attempt, more terms are taken (then the remaining strategies, then the question's content terms only) until
    it differs. Path `rewrite_and_retry`; `state["rewrites"]` records each rewrite.

    **condense** (before routing): when `state["history"]` is non-empty and the question is conversational
    (a short follow-up such as "and for the free tier?", or a short question that leans on a pronoun such as
    "how much does it cost?"), it is rewritten into a standalone question by rules, without a model. The topic is
    the noun phrase of the previous user turn that the question asked about ("How do I rotate *an API key*?",
    "Which *regions* ...", "How much does *the basic tier* cost?"); a leading "and"/"so" is dropped, then:
    a new entity ("what about X", "and for X", "and the X?") takes the place of the matching phrase of the previous
    question ("How much does the premium tier cost?"); else the first pronoun (it, this, that, they, them, one)
    becomes the topic ("how do I revoke an API key?"); else the question is put in context with
    `context_template` ("Regarding two-factor authentication, what if I lose my phone?"). Earlier follow-ups in
    the history are resolved the same way first. Standalone questions are left unchanged. With a
    `chat_generator`, its rewrite replaces the rules' one (the rules remain the fallback). Path `condense_query`
    only when the query changed; `state["condensed_query"]` holds the standalone question.

    Usage:
    ```python
    from gatehouse.components.query.query_rewriter import QueryRewriter
    from gatehouse.components.state import new_state

    condenser = QueryRewriter(task="condense")
    state = new_state("and how do I revoke it?",
                      history=[{"role": "user", "content": "How do I rotate an API key?"}])
    condenser.run(state=state)["state"]["query"]   # "how do I revoke an API key?"

    rewriter = QueryRewriter(task="retry", kb_keywords={"faq": ["account", "password", "api_key", "billing"]})
    ```
    """

    def __init__(
        self,
        *,
        task: str = "retry",
        kb_keywords: dict[str, list[str]] | None = None,
        profile_store: Any = None,
        max_profile_keywords: int = 400,
        strategies: list[str] | None = None,
        max_expansion_terms: int = 3,
        min_keyword_similarity: float = 0.15,
        prf_terms: int = 3,
        prf_top_k: int = 3,
        prf_min_term_length: int = 3,
        stopwords: list[str] | None = None,
        stemmer_language: str | None = "english",
        max_history_turns: int = 2,
        use_assistant_turns: bool = False,
        max_condense_words: int = 12,
        max_reference_content_terms: int = 3,
        followup_patterns: list[str] | None = None,
        pronouns: list[str] | None = None,
        noun_pronouns: list[str] | None = None,
        leading_connectives: list[str] | None = None,
        ellipsis_patterns: list[str] | None = None,
        determiners: list[str] | None = None,
        question_determiners: list[str] | None = None,
        prepositions: list[str] | None = None,
        auxiliary_verbs: list[str] | None = None,
        verb_cues: list[str] | None = None,
        definite_article: str = "the",
        context_template: str = DEFAULT_CONTEXT_TEMPLATE,
        embedding_model: str | None = None,
        embedding_cache_dir: str | None = None,
        chat_generator: Any = None,
        rewrite_prompt: str = DEFAULT_REWRITE_PROMPT,
        condense_prompt: str = DEFAULT_CONDENSE_PROMPT,
        max_query_chars: int = 500,
    ) -> None:
        """
        :param task: `"retry"` (rewrite for the next retrieval attempt) or `"condense"` (standalone follow-ups).
        :param kb_keywords: Knowledge base name -> domain keywords (from the KB YAML); `_` reads as a space.
        :param profile_store: The lexical store whose KB profiles (`gatehouse.components.kb_profile`) give each
            routed KB's keywords: its own entry's keywords, the long form of an abbreviation the question uses (and
            the abbreviation of a long form), and its titles and headings.
        :param max_profile_keywords: Most titles and headings of one KB taken as keywords.
        :param strategies: Order in which retry strategies are added, cumulatively; None means
            `["keywords", "feedback"]`.
        :param max_expansion_terms: KB keywords added per attempt.
        :param min_keyword_similarity: Least cosine similarity between the question and a keyword to add it.
        :param prf_terms: Feedback terms added per attempt.
        :param prf_top_k: Weak documents (best first) that feedback terms are taken from.
        :param prf_min_term_length: Shorter feedback terms are ignored.
        :param stopwords: Words never used as terms; None uses the built-in English list.
        :param stemmer_language: Snowball stemmer language for term matching, or None for exact tokens.
        :param max_history_turns: Most recent user turns the condenser looks at.
        :param use_assistant_turns: Take the topic from the last assistant turn first (when the history ends
            with one), then from the user turns.
        :param max_condense_words: Questions longer than this are never treated as follow-ups.
        :param max_reference_content_terms: A question with a pronoun and no follow-up pattern counts as a
            follow-up when it has at most this many content terms.
        :param followup_patterns: Regexes (case-insensitive) marking a follow-up; None uses the defaults
            (`and ...`, `what about ...`, `... too?`).
        :param pronouns: Words that refer back to the topic and are replaced by it; None uses
            `it, this, that, these, those, they, them` (this/that/these/those only when they stand alone).
        :param noun_pronouns: Words that stand for the topic's noun ("the last *one*" -> "the last region"; a bare
            "one" becomes the whole topic); None uses `one, ones`.
        :param leading_connectives: Words dropped from the start of a follow-up ("and", "so", ...).
        :param ellipsis_patterns: Regexes (case-insensitive) for a follow-up that names a new entity in a named
            group `entity` (and optionally its preposition in `prep`): "what about X", "and for X", "and the X".
        :param determiners: Words that open a noun phrase and stay with it ("an API key").
        :param question_determiners: Question words that open the asked-about noun phrase ("which regions"); it is
            mentioned again with `definite_article`.
        :param prepositions: Words before a noun phrase that an "and for X" follow-up may replace.
        :param auxiliary_verbs: After "does <subject>", the subject's last word is the main verb ("does the Team
            plan *cost*").
        :param verb_cues: After these words the next content word is a verb ("do I *rotate*", "how to *reset*").
        :param definite_article: The article of a topic taken from a question word ("which regions" -> "the
            regions").
        :param context_template: Standalone form of a follow-up without a pronoun or a new entity; `{topic}` and
            `{question}` are replaced.
        :param embedding_model: Embedding model for keyword ranking; None uses the configured default.
        :param embedding_cache_dir: Embedding cache directory; None uses the default, `"off"` disables it.
        :param chat_generator: Optional Haystack chat generator for an LLM rewrite/condense tier; None disables it.
        :param rewrite_prompt: LLM retry prompt; `{question}`, `{previous_queries}`, `{keywords}`,
            `{feedback_terms}` are replaced.
        :param condense_prompt: LLM condense prompt; `{history}` and `{question}` are replaced.
        :param max_query_chars: An LLM reply longer than this is rejected.
        :raises ValueError: On an unknown task or strategy, or limits out of bounds.
        """
        if task not in TASKS:
            raise ValueError(f"Unknown task '{task}'. Use one of {', '.join(TASKS)}.")
        unknown = [s for s in (strategies or []) if s not in STRATEGIES]
        if unknown:
            raise ValueError(f"Unknown strategies {unknown}. Use {', '.join(STRATEGIES)}.")
        if min(max_expansion_terms, prf_terms, prf_top_k, max_history_turns) < 0:
            raise ValueError("Term and turn limits must be >= 0.")
        self.task = task
        self.kb_keywords = kb_keywords
        self.profile_store = profile_store
        self.max_profile_keywords = max_profile_keywords
        self._profiles = KBProfiles(profile_store) if profile_store is not None else None
        self.strategies = strategies
        self.max_expansion_terms = max_expansion_terms
        self.min_keyword_similarity = min_keyword_similarity
        self.prf_terms = prf_terms
        self.prf_top_k = prf_top_k
        self.prf_min_term_length = prf_min_term_length
        self.stopwords = stopwords
        self.stemmer_language = stemmer_language
        self.max_history_turns = max_history_turns
        self.use_assistant_turns = use_assistant_turns
        self.max_condense_words = max_condense_words
        self.max_reference_content_terms = max_reference_content_terms
        self.followup_patterns = followup_patterns
        self.pronouns = pronouns
        self.noun_pronouns = noun_pronouns
        self.leading_connectives = leading_connectives
        self.ellipsis_patterns = ellipsis_patterns
        self.determiners = determiners
        self.question_determiners = question_determiners
        self.prepositions = prepositions
        self.auxiliary_verbs = auxiliary_verbs
        self.verb_cues = verb_cues
        self.definite_article = definite_article
        self.context_template = context_template
        self.embedding_model = embedding_model
        self.embedding_cache_dir = embedding_cache_dir
        self.chat_generator = chat_generator
        self.rewrite_prompt = rewrite_prompt
        self.condense_prompt = condense_prompt
        self.max_query_chars = max_query_chars

        self._terms = TermNormaliser(stopwords, stemmer_language, 2)
        self._strategies = list(strategies) if strategies is not None else list(STRATEGIES)
        self._followup = [
            re.compile(p, re.IGNORECASE)
            for p in (DEFAULT_FOLLOWUP_PATTERNS if followup_patterns is None else followup_patterns)
        ]

        def words(value: list[str] | None, default: list[str]) -> frozenset[str]:
            return frozenset(w.casefold() for w in (default if value is None else value))

        self._noun_pronouns = words(noun_pronouns, DEFAULT_NOUN_PRONOUNS)
        self._pronouns = words(pronouns, DEFAULT_PRONOUNS) | self._noun_pronouns
        self._question_determiners = words(question_determiners, DEFAULT_QUESTION_DETERMINERS)
        self._determiners = words(determiners, DEFAULT_DETERMINERS) | self._question_determiners
        self._prepositions = words(prepositions, DEFAULT_PREPOSITIONS)
        self._auxiliaries = words(auxiliary_verbs, DEFAULT_AUXILIARY_VERBS)
        self._verb_cues = words(verb_cues, DEFAULT_VERB_CUES)
        connectives = DEFAULT_LEADING_CONNECTIVES if leading_connectives is None else leading_connectives
        self._connective = re.compile(
            rf"^(?:{'|'.join(re.escape(c) for c in connectives) or '(?!)'})\b[\s,]*", re.IGNORECASE
        )
        self._ellipsis = [
            re.compile(p, re.IGNORECASE)
            for p in (DEFAULT_ELLIPSIS_PATTERNS if ellipsis_patterns is None else ellipsis_patterns)
        ]
        self._backend: EmbeddingBackend | None = None
        self._keyword_vectors: dict[str, np.ndarray] = {}

    def warm_up(self) -> None:
        """Load the embedding backend (retry task with keywords) and warm up the optional chat generator."""
        if self.task == "retry" and (self.kb_keywords or self._profiles) and self._backend is None:
            self._backend = EmbeddingBackend.get(model=self.embedding_model, cache_dir=self.embedding_cache_dir)
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    @component.output_types(state=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Rewrite (task `retry`) or condense (task `condense`) the query.

        :param state: The request state.
        :returns: `state`, a new state.
        """
        if self.task == "condense":
            return {"state": self._condense(state)}
        return {"state": self._retry(state)}

    # ---------------------------------------------------------------- retry

    def _profile_keywords(self, question: str, kbs: list[str], tenant: str | None) -> list[str]:
        """What the routed KBs' profiles offer: abbreviations the question uses or spells out, entry keywords, headings."""
        if self._profiles is None:
            return []
        asked = question.casefold()
        found: list[str] = []
        for profile in self._profiles.readable(tenant):
            if kbs and profile.kb not in kbs:
                continue
            for short, long in profile.abbreviations.items():
                if re.search(rf"\b{re.escape(short)}s?\b", question):
                    found.append(long)
                elif long.casefold() in asked:
                    found.append(short)
            found += list((profile.entry or {}).get("keywords") or [])
            found += [*profile.titles, *profile.headings][: self.max_profile_keywords]
        return [k.rstrip("*") for k in found]

    def _expansion_keywords(self, question: str, kbs: list[str], tenant: str | None = None) -> list[str]:
        """KB keywords ranked by similarity to the question, without those already in it."""
        keywords: list[str] = []
        for kb in kbs:
            for keyword in (self.kb_keywords or {}).get(kb, []):
                text = " ".join(str(keyword).replace("_", " ").split())
                if text and text.casefold() not in {k.casefold() for k in keywords}:
                    keywords.append(text)
        for keyword in self._profile_keywords(question, kbs, tenant):
            text = " ".join(keyword.split())
            if text and text.casefold() not in {k.casefold() for k in keywords}:
                keywords.append(text)
        question_terms = set(self._terms.terms(question))
        keywords = [k for k in keywords if not set(self._terms.terms(k)) <= question_terms]
        if not keywords:
            return []
        if self._backend is None:
            self.warm_up()
        assert self._backend is not None
        missing = [k for k in keywords if k not in self._keyword_vectors]
        if missing:
            self._keyword_vectors.update(zip(missing, self._backend.embed(missing)))
        query_vector = self._backend.embed([question])[0]
        scored = [(float(np.dot(self._keyword_vectors[k], query_vector)), k) for k in keywords]
        ranked = sorted(scored, key=lambda pair: (-pair[0], pair[1]))
        return [k for similarity, k in ranked if similarity >= self.min_keyword_similarity]

    def _feedback_terms(self, question: str, documents: list[Document], exclude: set[str]) -> list[str]:
        """Pseudo-relevance-feedback terms: rank-weighted tf of the top weak documents times idf over all of them."""
        if not documents:
            return []
        excluded = set(self._terms.terms(question)) | exclude
        doc_terms: list[list[tuple[str, str]]] = []
        for document in documents:
            tokens = [
                (self._terms.stem(t), t)
                for t in tokenize(document.content or "")
                if self._terms.is_content(t) and len(t) >= self.prf_min_term_length and not t.isdigit()
            ]
            doc_terms.append(tokens)
        total = len(doc_terms)
        df: Counter[str] = Counter()
        for tokens in doc_terms:
            df.update({stem for stem, _ in tokens})
        weights: dict[str, float] = defaultdict(float)
        surfaces: dict[str, Counter[str]] = defaultdict(Counter)
        for rank, tokens in enumerate(doc_terms[: self.prf_top_k]):
            if not tokens:
                continue
            counts = Counter(stem for stem, _ in tokens)
            for stem, surface in tokens:
                surfaces[stem][surface] += 1
            for stem, count in counts.items():
                if stem in excluded:
                    continue
                idf = math.log((total + 1) / (df[stem] + 0.5)) + 1.0
                weights[stem] += (count / len(tokens)) * idf / (rank + 1)
        ranked = sorted(weights.items(), key=lambda pair: (-pair[1], pair[0]))
        result = []
        for stem, _ in ranked:
            surface = sorted(surfaces[stem].items(), key=lambda pair: (-pair[1], len(pair[0]), pair[0]))[0][0]
            result.append(surface)
        return result

    def _retry_candidates(
        self, question: str, pools: dict[str, list[str]], attempt: int
    ) -> list[tuple[list[str], list[str], str]]:
        """Ordered `(strategies, terms, query)` candidates for an attempt, the planned one first."""
        limits = {"keywords": self.max_expansion_terms, "feedback": self.prf_terms}
        level = max(1, attempt)
        active = self._strategies[:level]
        extra = max(0, level - len(self._strategies))
        longest = max([len(pool) for pool in pools.values()] + [0])
        candidates: list[tuple[list[str], list[str], str]] = []
        for strategy_set in (active, self._strategies):
            for widen in range(0, longest + 1):
                terms: list[str] = []
                for strategy in strategy_set:
                    terms.extend(pools.get(strategy, [])[: limits[strategy] + extra + widen])
                terms = list(dict.fromkeys(terms))
                candidates.append((list(strategy_set), terms, " ".join([question.strip(), *terms])))
        # Last resort: the question's content words only, plus the planned terms.
        focus = [t for t in re.findall(r"[^\W_]+", question) if self._terms.is_content(t.casefold())]
        if focus:
            planned = candidates[0][1] if candidates else []
            candidates.append((["focus", *active], planned, " ".join([*focus, *planned])))
        return candidates

    def _retry(self, state: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        question = str(state.get("condensed_query") or state.get("original_query") or state.get("query") or "")
        attempt = int(state.get("attempt") or 1)
        rewrites = list(state.get("rewrites") or [])
        previous = [str(a.get("query") or "") for a in state.get("attempts") or []]
        previous += [str(r.get("query") or "") for r in rewrites]
        previous += [str(state.get("query") or ""), question]

        kbs = list(state.get("kbs") or ([state["kb"]] if state.get("kb") else list((self.kb_keywords or {}).keys())))
        keywords = self._expansion_keywords(question, kbs, state.get("tenant"))
        keyword_stems = {s for k in keywords for s in self._terms.terms(k)}
        feedback = self._feedback_terms(question, list(state.get("documents") or []), keyword_stems)
        pools = {"keywords": keywords, "feedback": feedback}

        candidates = self._retry_candidates(question, pools, attempt)
        fresh = [c for c in candidates if not any(_same_query(c[2], p) for p in previous)]
        strategies, terms, new_query = fresh[0] if fresh else candidates[0]
        record: dict[str, Any] = {
            "attempt": attempt,
            "method": "deterministic",
            "strategies": strategies,
            "keywords": [t for t in terms if t in keywords],
            "feedback_terms": [t for t in terms if t in feedback],
        }
        warnings = [] if fresh else ["query_rewriter: no new expansion terms; the query repeats an earlier attempt"]
        if self.chat_generator is not None:
            prompt = (
                self.rewrite_prompt.replace("{question}", question)
                .replace("{previous_queries}", "; ".join(dict.fromkeys(p for p in previous if p)))
                .replace("{keywords}", ", ".join(keywords))
                .replace("{feedback_terms}", ", ".join(feedback))
            )
            try:
                reply = _first_line(ask_chat_generator(self.chat_generator, prompt))
                if not reply or len(reply) > self.max_query_chars:
                    raise ValueError("empty or overlong reply")
                if any(_same_query(reply, p) for p in previous):
                    raise ValueError("reply repeats an earlier query")
                new_query, record["method"], warnings = reply, "llm", []
            except Exception as error:  # noqa: BLE001 - any LLM failure falls back to the deterministic rewrite
                record["llm_error"] = f"{type(error).__name__}: {error}"
                warnings.append(
                    f"query_rewriter: LLM rewrite failed ({record['llm_error']}); deterministic rewrite used"
                )
        record["query"] = new_query
        rewrites.append(record)
        base = with_validation(state, "confidence_warnings", *warnings) if warnings else state
        return advance(
            base,
            stage="query_rewriter",
            started=started,
            steps=["rewrite_and_retry"],
            query=new_query,
            rewrites=rewrites,
        )

    # ------------------------------------------------------------- condense

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
        if any(p.search(question) for p in self._followup):
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

    def _mention(self, phrase: _Phrase) -> str:
        """How a phrase is mentioned again: with its article, or `the` after a question word."""
        if phrase.determiner in self._question_determiners:
            return f"{self.definite_article} {phrase.text}".strip()
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

    def _strip_connective(self, question: str) -> str:
        """The question without a leading "and", "so", ... (keeping its initial capital)."""
        stripped = question.strip()
        match = self._connective.match(stripped)
        if not match or not stripped[match.end() :].strip():
            return stripped
        rest = stripped[match.end() :].lstrip()
        return rest[:1].upper() + rest[1:] if stripped[:1].isupper() else rest

    def condense_question(self, question: str, history: list[dict[str, Any]]) -> str:
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
            resolved.append(self.condense_question(turn, earlier) if earlier else turn)
        sources = list(reversed(resolved))
        if self.use_assistant_turns and history and history[-1].get("role") == "assistant":
            sources.insert(0, str(history[-1].get("content") or ""))
        topic = next((self._topic(phrases) for phrases in map(self.noun_phrases, sources) if phrases), None)
        if topic is None:
            return question
        body = self._strip_connective(question)
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
        first, _, rest = body.partition(" ")
        inside = not self.context_template.lstrip().startswith("{question}")
        if inside and first[1:].islower() and first != "I":
            body = f"{first[:1].lower()}{first[1:]} {rest}".strip()
        return self.context_template.replace("{topic}", topic.text).replace("{question}", body)

    def _condense(self, state: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        question = str(state.get("query") or "")
        history = [t for t in (state.get("history") or []) if isinstance(t, dict)]
        if not history or not question.strip() or not self.is_followup(question):
            return advance(state, stage="query_condenser", started=started, condensed_query=question)

        condensed = self.condense_question(question, history)
        warning = None
        if self.chat_generator is not None:
            turns = history[-2 * self.max_history_turns :] if self.max_history_turns else []
            transcript = "\n".join(f"{t.get('role')}: {t.get('content')}" for t in turns)
            prompt = self.condense_prompt.replace("{history}", transcript).replace("{question}", question)
            try:
                reply = _first_line(ask_chat_generator(self.chat_generator, prompt))
                if not reply or len(reply) > self.max_query_chars:
                    raise ValueError("empty or overlong reply")
                condensed = reply
            except Exception as error:  # noqa: BLE001 - any LLM failure falls back to the deterministic condense
                warning = f"query_rewriter: LLM condense failed ({type(error).__name__}: {error}); rules used"
        base = with_validation(state, "confidence_warnings", warning) if warning else state
        changed = not _same_query(condensed, question)
        return advance(
            base,
            stage="query_condenser",
            started=started,
            steps=["condense_query"] if changed else [],
            query=condensed,
            condensed_query=condensed,
        )

    # -------------------------------------------------------- serialisation
