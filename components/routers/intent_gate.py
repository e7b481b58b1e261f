"""
The intent gate: classifies a query into one of ten intents and decides whether it needs retrieval.
"""

import time
from copy import deepcopy
from typing import Any

from haystack import component, logging

from gatehouse.components.chat import ChatGeneratorSerialization, ask_chat_generator
from gatehouse.components.kb_profile import KBProfile, KBProfiles
from gatehouse.components.terms import TermNormaliser, stem, tokenize, tokens
from gatehouse.components.state import State, advance, with_validation
from gatehouse.components.routers.tiered_classifier import (
    Decision,
    ExampleIndex,
    KeywordMatcher,
    PatternMatcher,
    compile_pattern,
    decide,
    fill_prompt,
    normalize_text,
    parse_json_object,
    parse_labels,
)

from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

logger = logging.getLogger(__name__)

ROUTES = ("retrieve", "direct", "refuse")
#: Words of a request to write code, not of what the code is about.
REQUEST_WORDS = frozenset("write code coding function functions script scripts program snippet snippets example "
                          "examples generate implement create build make show give help".split())

# The retrieval decision: tier 1, regular expressions. Checked in this order: refuse, direct, retrieve, general.
#: Requests to write code: refused, unless the knowledge bases document what the code is about (a request to write
#: code with the documented API is a question about the documentation).
DEFAULT_CODE_REQUEST_PATTERNS = [
    r"^\W*(?:(?:please|can you|could you|would you|will you|i need you to|i want you to|help me)\s+)*"
    r"(?:write|generate|create|code|build|implement|develop|produce|make)\s+(?:me\s+|us\s+)?"
    r"(?:[\w+#.\-]+\s+){0,4}?(?:script|program|code|function|class|app|application|bot|scraper|crawler|"
    r"module|component|snippet|macro|plugin|extension|cli tool|website|web ?page)s?\b",
]
DEFAULT_REFUSE_PATTERNS = [
    # External actions.
    r"^\W*(?:(?:please|can you|could you|would you)\s+)*(?:send|e-?mail|text|message|call|phone|book|reserve|"
    r"order|buy|purchase|transfer|wire|pay|post|tweet|schedule)\b.*\b(?:for me|on my behalf)\b",
    r"^\W*(?:(?:please|can you|could you|would you)\s+)*(?:send|write)\s+(?:an?\s+)?(?:e-?mail|text message|"
    r"sms|message|letter)\s+to\b",
    r"^\W*(?:(?:please|can you|could you|would you)\s+)*(?:book|reserve)\s+(?:me\s+)?(?:an?\s+|the\s+)?"
    r"(?:flight|hotel|table|room|ticket|taxi|cab|car)s?\b",
    r"^\W*(?:(?:please|can you|could you|would you)\s+)*(?:transfer|wire|send)\s+(?:me\s+)?[$€£]?\d",
    # Clearly harmful requests.
    r"\b(?:how (?:do|can|could|would) (?:i|we|you)|how to|help me|teach me to|ways to)\s+"
    r"(?:hack|crack|steal|phish|ddos|dox|stalk|spy on|break into|launder)\b",
    r"\b(?:hack|break|get)\s+into\s+(?:someone|somebody|another|other people|my (?:ex|neighbou?r|boss|partner))",
    r"\b(?:write|create|build|make|generate|code)\s+(?:me\s+)?(?:an?\s+)?(?:malware|virus|ransomware|keylogger|"
    r"botnet|trojan|worm|exploit|phishing (?:e-?mail|page|site))\b",
    r"\b(?:make|build|synthesi[sz]e|cook)\s+(?:an?\s+)?(?:bomb|explosive|nerve agent|meth|weapon)s?\b",
]
# Whole-message greetings, thanks and small talk: a direct answer, and the chitchat intent.
SMALL_TALK_PATTERNS = [
    r"^\W*(?:hi|hello|hey|hiya|howdy|greetings|yo|good (?:morning|afternoon|evening|day))"
    r"(?:\s+(?:there|all|everyone|team|folks|friend|bot))?[\s!.,:;)(\-]*$",
    r"^\W*(?:thanks|thank you|thx|ty|cheers|many thanks|much appreciated|great|awesome|perfect|ok(?:ay)?|cool)"
    r"(?:\s+(?:so|very)\s+much|\s+a lot|\s+again)?(?:,?\s+(?:for (?:your|the|all the|all your) help|"
    r"that (?:helps|helped|works|worked)))?[\s!.,:;)(\-]*$",
    r"^\W*(?:how are you(?: doing)?(?: today)?|how's it going|what's up|who are you|what are you|"
    r"what can you (?:do|help (?:me |us )?with)(?: for (?:me|us))?|"
    r"are you a (?:bot|robot|human)|nice to meet you|tell me a joke)[\s!?.,)]*$",
    r"^\W*(?:bye|goodbye|good bye|see you|see ya|later|have a (?:nice|good|great) day)[\s!.,)]*$",
]
DEFAULT_DIRECT_PATTERNS = [
    *SMALL_TALK_PATTERNS,
    # Arithmetic.
    r"^\W*(?:what(?:'s| is)|calculate|compute|how much is|solve|evaluate)?\s*\(?\s*-?\d+(?:[.,]\d+)?\s*\)?"
    r"(?:\s*(?:[-+*/x×÷^%]|\*\*|times|plus|minus|divided by|multiplied by|over|to the power of)\s*\(?\s*-?\d+"
    r"(?:[.,]\d+)?\s*\)?)+\s*[?=.!]*\s*$",
]
DEFAULT_RETRIEVE_PATTERNS = [
    r"\b(?:your|our|yours|ours)\b",
    # Product-style error codes such as ABC-1042.
    r"\b[A-Z]{2,5}-\d{3,5}\b",
]
DEFAULT_GENERAL_KNOWLEDGE_PATTERNS = [
    r"\bin general\b",
    r"\bgenerally speaking\b",
    r"\bin plain english\b",
    r"^\W*what(?:'s| is) the capital (?:city )?of\b",
    r"^\W*who (?:wrote|invented|discovered|painted|composed|founded|was the first)\b",
    r"^\W*(?:how (?:do (?:i|you)|to|can i)|what(?:'s| is) the (?:syntax|way))\b.*\b(?:in|with|using)\s+"
    r"(?:python|javascript|typescript|java|c\+\+|c#|golang|go|rust|ruby|php|bash|shell|sql|regex|kotlin|swift)"
    r"\s*[?.!]*$",
    r"^\W*what (?:does|do) (?:the )?http (?:status )?(?:code )?\d{3}\b",
]

# The retrieval decision: tier 2, keywords. What the knowledge bases are about is learned from them (KB profiles);
# `domain_keywords` adds words of your own.
DEFAULT_DOMAIN_KEYWORDS: list[str] = []
DEFAULT_REFUSE_KEYWORDS = ["horoscope", "lottery numbers", "betting tip*", "stock tip*", "weather forecast"]
DEFAULT_GENERAL_KEYWORDS = [
    "capital of", "population of", "who wrote", "who invented", "list comprehension", "for loop", "while loop",
    "recursion", "big o", "binary search", "sorting algorithm", "linked list", "hash map", "photosynthesis",
    "speed of light", "boiling point",
]

# The retrieval decision: tier 3, labelled examples (questions of no particular domain).
DEFAULT_EXAMPLES = {
    "direct": [
        "hi",
        "hello, how are you?",
        "thanks, that was helpful",
        "what is 15 plus 27",
        "what is the square root of 144",
        "what is the capital of Italy",
        "who wrote Romeo and Juliet",
        "how do I reverse a list in Python",
        "what is the syntax of a for loop in JavaScript",
        "what does HTTP status 500 mean in general",
        "explain what a binary search is",
        "how many days are in a leap year",
    ],
    "retrieve": [
        "how do I configure this setting",
        "what is the default value of this option",
        "how do I install and set it up",
        "which versions are supported",
        "what does this error message mean",
        "how do I turn this feature off",
        "where do I find the configuration file",
        "what is the policy for requesting time off",
        "who do I contact to get access",
        "what are the limits and how do I change them",
        "is this supported on my platform",
        "how do I upgrade to the latest version",
    ],
    "refuse": [
        "write a python script that downloads all images from a website",
        "write me a bash script that deletes old files",
        "generate a React component for a login form",
        "send an email to my manager",
        "book a flight to Paris for me",
        "order a pizza",
        "how do I hack into my neighbour's wifi",
        "create a keylogger",
    ],
}

# The intent: tier 1, regular expressions, tried in the order of this mapping.
DEFAULT_INTENT_PATTERNS = {
    "chitchat": list(SMALL_TALK_PATTERNS),
    "clarification": [
        r"^\W*(?:what do you mean|can you clarify|could you clarify|i don't understand|i do not understand|"
        r"can you elaborate|could you elaborate|what\?+|huh\??|come again|say that again|more details please)\b",
        r"^\W*(?:and|but|what about|how about)\s+(?:that|this|it|them|those)\s*\??\s*$",
    ],
    "out_of_scope": [
        r"^\W*(?:(?:please|can you|could you)\s+)*(?:write|generate|create|code|build|implement)\s+(?:me\s+)?"
        r"(?:[\w+#.\-]+\s+){0,4}?(?:script|program|code|function|app|bot|scraper|poem|song|story|essay|joke)s?\b",
        # A topic with its context ("the weather in Paris", "a recipe for"): a bare "weather" or "recipe" also
        # occurs in encyclopedic questions.
        r"^\W*(?:what(?:'s| is| will be)|how(?:'s| is)) the weather\b",
        r"\bweather\b.*\b(?:today|tonight|tomorrow|this (?:week|weekend)|next (?:week|weekend)|right now|forecast)\b",
        r"\b(?:weather forecast|horoscope|lottery numbers|recipes? for|sports? scores?|movie recommendations?|"
        r"recommend (?:me |us )?(?:an? |some )?(?:good |great |nice )?(?:movie|film|book|song|restaurant)s?)\b",
    ],
    "comparison": [
        r"\b(?:compare|comparison|compared to|vs\.?|versus|difference(?:s)? between|differ(?:s)? from|"
        r"better than|worse than|cheaper than|faster than|which is (?:better|cheaper|faster))\b",
    ],
    "temporal": [
        r"^\W*when\b",
        r"\b(?:latest|most recent|recently|release date|released|changelog|roadmap|upcoming|last (?:week|month|"
        r"year|release|version|update)|next (?:release|version)|deprecat\w*|end of life|eol|since (?:version|v?\d))\b",
        r"\b(?:19|20)\d\d\b",
    ],
    "opinion": [
        r"\b(?:should (?:i|we)|do you (?:think|recommend|like|prefer)|would you recommend|"
        r"is it (?:worth|wise|a good idea)|"
        r"your (?:opinion|recommendation|view)|what do you think|is .* any good)\b",
    ],
    "aggregation": [
        r"^\W*(?:list|enumerate|summari[sz]e|give me (?:a )?(?:list|summary|overview))\b",
        r"\b(?:list (?:of |all )|all (?:the )?(?:available|supported)|every (?:available|supported)|overview of|"
        r"how many (?:\w+ )?(?:are|do you) (?:there|available|supported|offer))\b",
    ],
    "procedural": [
        r"^\W*(?:how (?:do|can|should|would|could) (?:i|we|you|one)|how to|what are the steps|steps to|"
        r"walk me through|guide me|help me (?:to )?(?:set|configure|install|deploy|enable|reset|rotate|change))\b",
        r"^\W*(?:(?:please )?(?:show|tell) me how)\b",
    ],
    "explanation": [
        r"^\W*(?:why|explain|describe)\b",
        r"^\W*how (?:does|do|is|are)\b(?! (?:i|we|you|one)\b)",
        r"\b(?:what happens (?:when|if)|what is the (?:reason|purpose|point)|how .* works?)\b",
    ],
    "factual": [
        r"^\W*(?:what|which|who|where|whose|is|are|does|do|can|could|will|has|have|how (?:much|many|long|often|big|"
        r"fast|large|old))\b",
    ],
}
# The intent: tier 2, keywords.
DEFAULT_INTENT_KEYWORDS = {
    "procedural": ["steps", "set up", "setup", "configure", "install", "enable", "disable", "rotate", "reset",
                   "tutorial", "guide", "instructions"],
    "comparison": ["difference", "compare*", "versus", "vs", "better", "cheaper", "faster", "alternative*"],
    "explanation": ["why", "explain*", "reason", "purpose", "meaning", "works"],
    "aggregation": ["list", "all", "every", "summar*", "overview", "options", "available"],
    "temporal": ["when", "latest", "recent*", "release*", "changelog", "history", "roadmap", "expire*", "date"],
    "opinion": ["recommend*", "should", "best", "worth", "prefer*", "opinion"],
    "clarification": ["clarify", "unclear", "confus*", "elaborate"],
    "chitchat": ["hello", "thanks", "thank you", "bye", "how are you"],
    # Phrases, never a bare topic word: "song" alone would refuse a question about the Song dynasty.
    "out_of_scope": ["weather forecast", "recipe for", "recipes for", "sports scores", "movie recommendation",
                     "good movie", "song lyrics", "write a song", "write a poem", "poem about", "horoscope",
                     "lottery numbers", "tell me a joke"],
    "factual": ["price", "cost", "limit", "support*", "include*", "status"],
}
# The intent: tier 3, labelled examples.
DEFAULT_INTENT_EXAMPLES = {
    "factual": ["What is the default timeout?", "Is there a size limit?", "What is the maximum number of retries?"],
    "comparison": ["What is the difference between the two modes?", "Is option A better than option B?"],
    "explanation": ["Why was my request rejected?", "How does the cache work?"],
    "aggregation": ["List all supported formats", "Give me an overview of every option"],
    "procedural": ["How do I reset the configuration?", "Steps to set up authentication"],
    "clarification": ["What do you mean?", "Can you explain that again?"],
    "chitchat": ["Hello there", "Thanks a lot!", "How are you today?"],
    "out_of_scope": ["What's the weather in Berlin?", "Write me a poem about cats"],
    "opinion": ["Should I pick the first option?", "Which setup would you recommend?"],
    "temporal": ["When was version 2.0 released?", "What changed in the latest release?"],
}

# The reply format without concrete values: given {"route": "retrieve", "intent": "procedural"} as an example, a
# 0.5B model (qwen0.5b) replied exactly that to every message (`gatehouse bench tiers`).
DEFAULT_LLM_PROMPT = """You classify messages sent to an assistant that answers from these knowledge bases:
{knowledge_bases}

route:
- "retrieve" when answering needs the knowledge bases: anything about what they cover, including how to use or \
write code with what they document. When in doubt, choose "retrieve".
- "direct" for greetings and small talk, arithmetic, common knowledge and general programming syntax.
- "refuse" for requests to perform actions outside this chat, harmful requests, requests to write code unrelated \
to the knowledge bases, and clearly out-of-scope requests.

intent: one of {intents}.

Reply with JSON only, in the form {"route": "...", "intent": "..."}.

Message: {query}"""


def _string_list(value: list[str] | None, default: list[str], name: str) -> list[str]:
    """A copy of a list-of-strings init parameter (or of its default), rejecting a bare string or a mapping."""
    if value is None:
        return list(default)
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"'{name}' must be a list of strings, got {type(value).__name__}.")
    return list(value)


def _short(pattern: str, limit: int = 80) -> str:
    """A pattern quoted for a reason message, shortened to `limit` characters."""
    return repr(pattern if len(pattern) <= limit else pattern[: limit - 3] + "...")


@component
class IntentGate(ChatGeneratorSerialization):
    """
    Classifies the query into an intent and makes the retrieval decision: retrieve, answer directly, or refuse.

    Both decisions are made in tiers, cheapest first; each tier decides only when it is confident, otherwise it
    defers to the next:

    0. `profile` (with a `profile_store`): a question whose content words a readable knowledge base uses (see
       `profile_store`) is about the documents: it is retrieved, and a request to write code about them too.
    1. `regex`: refuse patterns (external actions, harmful requests), requests for code (refused unless the profile
       tier found them documented), direct patterns (greetings, whole-question arithmetic), retrieve patterns
       ("your", "our", error codes), then general-knowledge patterns (direct unless a domain keyword occurs).
    2. `keywords`: domain keywords (retrieve), refuse keywords, general-knowledge keywords (direct).

    A general-knowledge pattern or keyword sends a question to `direct` only when the rest of the question is
    short: at most `max_general_subject_terms` content words outside the matched cue ("What is the capital of
    *France*?" is direct; "Who was the first *Byzantine mercenary* to *serve* with the *Normans*?" goes on to
    the next tiers, as an encyclopedic question the knowledge bases may answer). Keywords match whole words (a
    trailing `*` any word ending); the out-of-scope intent keywords are phrases with context ("recipe for",
    "song lyrics"), never a bare topic word that an unrelated question may use ("the Song emperor").
    3. `embedding`: cosine similarity to labelled example queries, with a threshold and a margin.
    4. `llm`: an optional chat generator (off by default); failures fall back to the non-LLM result.
    5. `intent`: the intent implies the route (`intent_routes`: chitchat -> direct, out_of_scope -> refuse) when
       the intent was decided by one of `intent_route_tiers` (regex, keywords, llm).
    6. `default`: `default_route` (retrieve) and `default_intent` (factual).

    It writes `intent`, `intent_tier`, `route`, `decision_tier` and `decision_reason` into the state and emits it
    on the output named after the route. The path gets `intent_<intent>_retrieve`, `skip_retrieval` or `refuse`.

    Usage example:
    ```python
    from gatehouse.components.routers.intent_gate import IntentGate
    from gatehouse.components.state import new_state

    gate = IntentGate()
    result = gate.run(state=new_state("How do I reset my password?"))
    assert result["retrieve"]["intent"] == "procedural"
    result = gate.run(state=new_state("What is 12 * 7?"))
    assert "direct" in result
    ```
    """

    def __init__(  # noqa: PLR0913
        self,
        *,
        refuse_patterns: list[str] | None = None,
        code_request_patterns: list[str] | None = None,
        direct_patterns: list[str] | None = None,
        retrieve_patterns: list[str] | None = None,
        general_knowledge_patterns: list[str] | None = None,
        domain_keywords: list[str] | None = None,
        refuse_keywords: list[str] | None = None,
        general_keywords: list[str] | None = None,
        max_general_subject_terms: int = 2,
        stopwords: list[str] | None = None,
        examples: dict[str, list[str]] | None = None,
        embedding_threshold: float = 0.55,
        embedding_margin: float = 0.08,
        intent_patterns: dict[str, list[str]] | None = None,
        intent_keywords: dict[str, list[str]] | None = None,
        intent_keyword_margin: int = 1,
        intent_examples: dict[str, list[str]] | None = None,
        intent_embedding_threshold: float = 0.6,
        intent_embedding_margin: float = 0.05,
        intent_routes: dict[str, str] | None = None,
        intent_route_tiers: list[str] | None = None,
        default_route: str = "retrieve",
        default_intent: str = "factual",
        refuse_intent: str | None = "out_of_scope",
        refusal_message: str = "That is outside what I can help with here. Please ask about the documentation "
        "this assistant covers.",
        empty_query_route: str = "direct",
        empty_query_intent: str = "clarification",
        examples_top_k: int = 1,
        embedding_model: str | None = None,
        cache_dir: str | None = None,
        chat_generator: Any = None,
        llm_prompt: str = DEFAULT_LLM_PROMPT,
        profile_store: LexicalDocumentStore | None = None,
        include_public: bool = True,
        min_domain_coverage: float = 0.75,
    ) -> None:
        """
        Create the gate.

        :param refuse_patterns: Regular expressions that make the gate refuse (external actions, harmful requests).
            Case-insensitive, searched in the query.
        :param code_request_patterns: Regular expressions of requests to write code: refused, unless the question is
            about what the knowledge bases document (see `profile_store`), then retrieved.
        :param direct_patterns: Regular expressions that make the gate answer without retrieval whatever else the
            query mentions (greetings, thanks, arithmetic).
        :param retrieve_patterns: Regular expressions that force retrieval ("your", "our", the product name).
        :param general_knowledge_patterns: Regular expressions for common knowledge and general programming
            questions; they send the query to `direct` only when no domain keyword occurs in it.
        :param domain_keywords: Vocabulary of the product; any of them in the query means retrieve.
        :param refuse_keywords: Keywords that mean refuse (checked after the domain keywords).
        :param general_keywords: Keywords that mean a general question, answered directly (checked last).
        :param max_general_subject_terms: Most content words a question may have besides a general-knowledge
            pattern's or keyword's match for that match to send it to `direct`; longer, more specific questions go
            on to the next tiers.
        :param stopwords: Words not counted as content words; None uses the built-in English list.
        :param examples: Labelled example queries per route (`retrieve`, `direct`, `refuse`) for the embedding tier.
        :param embedding_threshold: Minimum similarity of the best route's examples for the embedding tier to decide.
        :param embedding_margin: Minimum lead of the best route over the second for the embedding tier to decide.
        :param intent_patterns: Regular expressions per intent, tried in mapping order.
        :param intent_keywords: Keywords per intent.
        :param intent_keyword_margin: How many more keyword hits the best intent needs than the second.
        :param intent_examples: Labelled example queries per intent for the embedding tier.
        :param intent_embedding_threshold: Minimum similarity for the intent embedding tier to decide.
        :param intent_embedding_margin: Minimum lead over the second intent for the intent embedding tier.
        :param intent_routes: Route implied by an intent when no route tier decided (default: chitchat -> direct,
            out_of_scope -> refuse).
        :param intent_route_tiers: The intent tiers trusted enough for `intent_routes` (default: regex, keywords,
            llm; an intent found only by embedding similarity does not change the route).
        :param default_route: Route when no tier decides.
        :param default_intent: Intent when no tier decides.
        :param refuse_intent: Intent recorded for refused requests (None keeps the classified intent).
        :param refusal_message: The answer of a refused request (status `refused`).
        :param empty_query_route: Route for an empty query.
        :param empty_query_intent: Intent for an empty query.
        :param examples_top_k: How many best-matching examples are averaged into a label's similarity.
        :param embedding_model: Embedding model for `EmbeddingBackend.get`; None uses the configured default.
        :param cache_dir: Embedding cache directory; None uses the configured default, `"off"` disables it.
        :param chat_generator: Optional Haystack chat generator for the LLM tier; None disables the tier.
        :param llm_prompt: Prompt for the LLM tier; `{query}`, `{intents}` and `{knowledge_bases}` (the readable KBs'
            descriptions) are replaced.
        :param profile_store: The lexical store whose knowledge-base profiles (`gatehouse.components.kb_profile`) tell
            the gate what the caller's knowledge bases cover. A question whose content words (besides the words of a
            request to write code) are found in a readable KB's vocabulary, at least `min_domain_coverage` of them
            and one in a title or heading, is never answered as general knowledge, never refused as off-topic or as a
            request for code: it is retrieved. None: no such check.
        :param include_public: Whether a tenant also reads the public KBs (as the router and the retrieval).
        :param min_domain_coverage: Share of a question's content words a KB's vocabulary must hold.
        :raises ValueError: If a pattern does not compile, a list is malformed or a route name is unknown.
        """
        self.refuse_patterns = _string_list(refuse_patterns, DEFAULT_REFUSE_PATTERNS, "refuse_patterns")
        self.code_request_patterns = _string_list(
            code_request_patterns, DEFAULT_CODE_REQUEST_PATTERNS, "code_request_patterns")
        self.direct_patterns = _string_list(direct_patterns, DEFAULT_DIRECT_PATTERNS, "direct_patterns")
        self.retrieve_patterns = _string_list(retrieve_patterns, DEFAULT_RETRIEVE_PATTERNS, "retrieve_patterns")
        self.general_knowledge_patterns = _string_list(
            general_knowledge_patterns, DEFAULT_GENERAL_KNOWLEDGE_PATTERNS, "general_knowledge_patterns"
        )
        self.domain_keywords = _string_list(domain_keywords, DEFAULT_DOMAIN_KEYWORDS, "domain_keywords")
        self.refuse_keywords = _string_list(refuse_keywords, DEFAULT_REFUSE_KEYWORDS, "refuse_keywords")
        self.general_keywords = _string_list(general_keywords, DEFAULT_GENERAL_KEYWORDS, "general_keywords")
        self.max_general_subject_terms = int(max_general_subject_terms)
        self.stopwords = stopwords
        self.examples = deepcopy(DEFAULT_EXAMPLES if examples is None else examples)
        self.embedding_threshold = float(embedding_threshold)
        self.embedding_margin = float(embedding_margin)
        self.intent_patterns = deepcopy(DEFAULT_INTENT_PATTERNS if intent_patterns is None else intent_patterns)
        self.intent_keywords = deepcopy(DEFAULT_INTENT_KEYWORDS if intent_keywords is None else intent_keywords)
        self.intent_keyword_margin = int(intent_keyword_margin)
        self.intent_examples = deepcopy(DEFAULT_INTENT_EXAMPLES if intent_examples is None else intent_examples)
        self.intent_embedding_threshold = float(intent_embedding_threshold)
        self.intent_embedding_margin = float(intent_embedding_margin)
        self.intent_routes = dict(
            {"chitchat": "direct", "out_of_scope": "refuse"} if intent_routes is None else intent_routes
        )
        self.intent_route_tiers = list(
            ["regex", "keywords", "llm"] if intent_route_tiers is None else intent_route_tiers
        )
        self.default_route = default_route
        self.default_intent = default_intent
        self.refuse_intent = refuse_intent
        self.refusal_message = refusal_message
        self.empty_query_route = empty_query_route
        self.empty_query_intent = empty_query_intent
        self.examples_top_k = int(examples_top_k)
        self.embedding_model = embedding_model
        self.cache_dir = cache_dir
        self.chat_generator = chat_generator
        self.llm_prompt = llm_prompt
        self.profile_store = profile_store
        self.include_public = bool(include_public)
        self.min_domain_coverage = float(min_domain_coverage)
        self._profiles = KBProfiles(profile_store) if profile_store is not None else None
        self._headings: dict[tuple[str, str, int], set[str]] = {}

        for name, route in [("default_route", default_route), ("empty_query_route", empty_query_route)] + [
            (f"intent_routes[{intent}]", route) for intent, route in self.intent_routes.items()
        ]:
            if route not in ROUTES:
                raise ValueError(f"'{name}' must be one of {', '.join(ROUTES)}, got {route!r}.")
        unknown = [label for label in self.examples if label not in ROUTES]
        if unknown:
            raise ValueError(f"'examples' keys must be routes ({', '.join(ROUTES)}); unknown: {', '.join(unknown)}.")

        for name in ("refuse_patterns", "code_request_patterns", "direct_patterns", "retrieve_patterns",
                     "general_knowledge_patterns"):
            for pattern in getattr(self, name):
                compile_pattern(pattern, name)
        self._route_patterns = PatternMatcher(
            {
                "refuse": self.refuse_patterns,
                "code": self.code_request_patterns,
                "direct": self.direct_patterns,
                "retrieve": self.retrieve_patterns,
                "general": self.general_knowledge_patterns,
            },
            owner="route patterns",
        )
        self._route_keywords = KeywordMatcher(
            {"retrieve": self.domain_keywords, "refuse": self.refuse_keywords, "direct": self.general_keywords},
            owner="route keywords",
        )
        self._terms = TermNormaliser(stopwords, None, 1)
        self._route_index = ExampleIndex(
            self.examples, embedding_model=embedding_model, cache_dir=cache_dir, top_k=self.examples_top_k,
            owner="examples",
        )
        self._intent_patterns = PatternMatcher(self.intent_patterns, owner="intent_patterns")
        self._intent_keywords = KeywordMatcher(self.intent_keywords, owner="intent_keywords")
        self._intent_index = ExampleIndex(
            self.intent_examples, embedding_model=embedding_model, cache_dir=cache_dir, top_k=self.examples_top_k,
            owner="intent_examples",
        )
        self.intents = list(
            dict.fromkeys(
                [*self.intent_patterns, *self.intent_keywords, *self.intent_examples, default_intent,
                 empty_query_intent, *([refuse_intent] if refuse_intent else [])]
            )
        )

    def warm_up(self) -> None:
        """Load the embedding model, embed the labelled examples once and warm up the chat generator, if any."""
        self._route_index.warm_up()
        self._intent_index.warm_up()
        if self.chat_generator is not None and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    # --- the route -------------------------------------------------------------------------------------------

    def _route_by_rules(self, query: str, domain: str | None) -> tuple[str, str, str] | None:
        """Tiers 1 and 2 of the retrieval decision: `(route, tier, reason)` or None to defer."""
        matches = self._route_patterns.matches(query)
        hits = self._route_keywords.hits(query)
        if matches["refuse"]:
            return "refuse", "regex", f"matched refuse pattern {_short(matches['refuse'][0])}"
        if matches["code"]:
            if domain:
                return "retrieve", "profile", f"asks for code with what the knowledge bases document ({domain})"
            return "refuse", "regex", f"matched code request pattern {_short(matches['code'][0])}"
        for route in ("direct", "retrieve"):
            if matches[route]:
                return route, "regex", f"matched {route} pattern {_short(matches[route][0])}"
        if domain:
            return "retrieve", "profile", f"about what the knowledge bases cover ({domain})"
        if matches["general"] and not hits["retrieve"] and self._general(query, self._route_patterns, "general"):
            return "direct", "regex", f"matched general-knowledge pattern {_short(matches['general'][0])}"
        for route in ("retrieve", "refuse", "direct"):
            if hits[route] and (route != "direct" or self._general(query, self._route_keywords, "direct")):
                return route, "keywords", f"{route} keywords: {', '.join(hits[route][:5])}"
        return None

    def _general(self, query: str, matcher: PatternMatcher | KeywordMatcher, label: str) -> bool:
        """Whether a general-knowledge cue leaves at most `max_general_subject_terms` content words."""
        text = normalize_text(query)
        covered = [False] * len(text)
        for start, end in matcher.spans(text, label):
            covered[start:end] = [True] * (end - start)
        rest = "".join(" " if hit else char for char, hit in zip(text, covered))
        subject = [token for token in tokenize(rest) if self._terms.is_content(token)]
        return len(subject) <= self.max_general_subject_terms

    def _domain(self, query: str, tenant: str | None) -> str | None:
        """
        Which readable knowledge base covers the question's content words (`min_domain_coverage` of them, one in a
        title or heading), as `"<kb>: 3/4 words"`; None when none does or there are no profiles.
        """
        if self._profiles is None:
            return None
        words = [w for w in tokens(query) if self._terms.is_content(w) and w not in REQUEST_WORDS]
        terms = list(dict.fromkeys(stem(w) for w in words if len(w) > 1 or w.isdigit()))
        if not terms:
            return None
        for profile in self._profiles.readable(tenant, include_public=self.include_public):
            found = {t for t in terms if profile.df(t) > 0}
            if len(found) >= self.min_domain_coverage * len(terms) and found & self._heading_terms(profile):
                return f"{profile.kb}: {len(found)}/{len(terms)} words"
        return None

    def _heading_terms(self, profile: KBProfile) -> set[str]:
        key = (profile.tenant, profile.kb, profile.generation)
        if key not in self._headings:
            self._headings = {k: v for k, v in self._headings.items() if k[:2] != key[:2]}
            self._headings[key] = profile.heading_terms()
        return self._headings[key]

    def _route_by_embedding(self, vector: Any) -> tuple[Decision, dict[str, float]]:
        scores = self._route_index.scores(vector)
        return decide(scores, threshold=self.embedding_threshold, margin=self.embedding_margin), scores

    # --- the intent ------------------------------------------------------------------------------------------

    def _intent_by_rules(self, query: str) -> tuple[str, str] | None:
        """Tiers 1 and 2 of the intent: `(intent, tier)` or None to defer."""
        first = self._intent_patterns.first(query)
        if first is not None:
            return first[0], "regex"
        hits = {label: len(words) for label, words in self._intent_keywords.hits(query).items() if words}
        if hits:
            decision = decide(hits, threshold=1, margin=self.intent_keyword_margin)
            if decision.confident and decision.label is not None:
                return decision.label, "keywords"
        return None

    # --- the LLM tier ----------------------------------------------------------------------------------------

    def _ask_llm(self, query: str, tenant: str | None) -> tuple[str | None, str | None, str | None]:
        """`(route, intent, error)` from the chat generator; unparseable parts are None."""
        profiles = self._profiles.readable(tenant, include_public=self.include_public) if self._profiles else []
        listing = "\n".join(f"- {profile.description}" for profile in profiles) or "- (none described)"
        prompt = fill_prompt(self.llm_prompt, query=query, intents=", ".join(self.intents), knowledge_bases=listing)
        try:
            reply = ask_chat_generator(self.chat_generator, prompt)
        except Exception as error:  # noqa: BLE001 - any generator failure falls back to the non-LLM result
            return None, None, f"{type(error).__name__}: {error}"
        parsed = parse_json_object(reply) or {}
        route = str(parsed.get("route", "")).strip().lower() or None
        intent = str(parsed.get("intent", "")).strip().lower() or None
        if route not in ROUTES:
            found = parse_labels(reply, list(ROUTES)) if not parsed else []
            route = found[0] if len(found) == 1 else None
        if intent not in self.intents:
            found = parse_labels(reply, self.intents) if not parsed else []
            intent = found[0] if len(found) == 1 else None
        error = None if route or intent else f"unparseable reply {reply[:200]!r}"
        return route, intent, error

    @component.output_types(retrieve=State, direct=State, refuse=State)
    def run(self, state: State) -> dict[str, dict[str, Any]]:
        """
        Classify `state["query"]` and emit the state on the route of the retrieval decision.

        :param state: The request state (see `gatehouse.components.state`); `query` is read.
        :returns: One of `{"retrieve": state}`, `{"direct": state}` or `{"refuse": state}`, where the new state
            carries `intent`, `intent_tier`, `route`, `decision_tier`, `decision_reason` and, when the embedding
            tier ran, `route_similarity` (similarity per route).
        """
        started = time.perf_counter()
        query = normalize_text(str(state.get("query") or ""))
        warnings: list[str] = []
        similarity: dict[str, float] = {}

        if not query:
            route, decision_tier, reason = self.empty_query_route, "empty", "empty query"
            intent, intent_tier = self.empty_query_intent, "empty"
        else:
            domain = self._domain(query, state.get("tenant"))
            route_rule = self._route_by_rules(query, domain)
            intent_rule = self._intent_by_rules(query)
            route = decision_tier = reason = None
            intent = intent_tier = None
            if route_rule is not None:
                route, decision_tier, reason = route_rule
            if intent_rule is not None:
                intent, intent_tier = intent_rule

            vector = None
            if route is None and not self._route_index.empty:
                vector = self._route_index.embed_query(query)
                decision, similarity = self._route_by_embedding(vector)
                if decision.confident:
                    route, decision_tier = decision.label, "embedding"
                    reason = f"similar to {decision.label} examples ({decision.score:.2f} vs {decision.second:.2f})"
            if intent is None and not self._intent_index.empty:
                vector = self._intent_index.embed_query(query) if vector is None else vector
                decision = decide(
                    self._intent_index.scores(vector),
                    threshold=self.intent_embedding_threshold,
                    margin=self.intent_embedding_margin,
                )
                if decision.confident:
                    intent, intent_tier = decision.label, "embedding"

            if (route is None or intent is None) and self.chat_generator is not None:
                llm_route, llm_intent, error = self._ask_llm(query, state.get("tenant"))
                if error:
                    warnings.append(f"intent_gate: LLM tier failed ({error}); used the non-LLM result")
                if route is None and llm_route:
                    route, decision_tier, reason = llm_route, "llm", "chosen by the LLM"
                if intent is None and llm_intent:
                    intent, intent_tier = llm_intent, "llm"

            if intent is None:
                intent, intent_tier = self.default_intent, "default"
            if route is None and intent_tier in self.intent_route_tiers and intent in self.intent_routes:
                route, decision_tier, reason = self.intent_routes[intent], "intent", f"implied by intent {intent}"
            if route is None:
                route, decision_tier, reason = self.default_route, "default", "no tier was confident"
            if route == "refuse" and self.refuse_intent and intent != self.refuse_intent:
                intent, intent_tier = self.refuse_intent, decision_tier
            if route == "retrieve" and decision_tier == "profile" and intent == self.refuse_intent:
                # a request for code with the documented API
                intent, intent_tier = "procedural", decision_tier

        steps = {"direct": ["skip_retrieval"], "refuse": ["refuse"]}.get(route, [f"intent_{intent}_{route}"])
        updates: dict[str, Any] = {
            "intent": intent,
            "intent_tier": intent_tier,
            "route": route,
            "decision_tier": decision_tier,
            "decision_reason": reason,
        }
        if similarity:
            updates["route_similarity"] = {label: round(score, 4) for label, score in similarity.items()}
        new_state = advance(state, stage="intent_gate", started=started, steps=steps, **updates)
        if warnings:
            new_state = with_validation(new_state, "confidence_warnings", *warnings)
        if route == "refuse":
            new_state = with_validation(
                {**new_state, "status": "refused", "answer": self.refusal_message},
                "boundary_violations", f"request refused ({decision_tier}: {reason})",
            )
        return {route: new_state}
