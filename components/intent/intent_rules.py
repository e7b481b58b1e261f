"""
The intent gate's built-in rules (plain Python, not a component): the regular expressions, keywords and labelled
examples that `gatehouse.components.intent.intent_gate.IntentGate` uses unless its `rules` setting replaces them.
No word of them names a particular knowledge base: what the knowledge bases cover is learned from their profiles.
"""

#: The outputs of the intent gate: the retrieval decision.
ROUTES = ("retrieve", "direct", "refuse")

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
# `rules.domain_keywords` adds words of your own.
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
