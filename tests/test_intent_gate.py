"""Tests for `gatehouse.components.intent.intent_gate.IntentGate` with real MiniLM embeddings."""

import re

import pytest
from haystack.components.generators.chat import MockChatGenerator, OpenAIChatGenerator
from haystack.utils import Secret

from gatehouse.components.embedders.embedding import EmbeddingBackend
from gatehouse.components.intent.intent_gate import IntentGate
from gatehouse.components.intent.intent_rules import DEFAULT_DOMAIN_KEYWORDS
from gatehouse.components.state import new_state
from gatehouse.pipelines import load_pipeline

INTENTS = {
    "factual", "comparison", "explanation", "aggregation", "procedural",
    "clarification", "chitchat", "out_of_scope", "opinion", "temporal",
}


@pytest.fixture(scope="module")
def gate() -> IntentGate:
    component = IntentGate(cache_dir="off")
    component.warm_up()
    return component


def route_of(gate: IntentGate, query: str, **fields) -> tuple[str, dict]:
    result = gate.run(state=new_state(query, **fields))
    assert len(result) == 1
    ((route, state),) = result.items()
    assert state["route"] == route
    return route, state


def test_init():
    gate = IntentGate(cache_dir="off")
    assert gate.outcomes["default_route"] == "retrieve"
    assert gate.outcomes["default_intent"] == "factual"
    assert gate.chat_generator is None
    assert gate.rules["domain_keywords"] == []  # what the knowledge bases cover is learned from their profiles
    assert set(gate.rules["examples"]) == {"direct", "retrieve", "refuse"}
    assert INTENTS <= set(gate.intents)
    assert set(gate.rules["intent_patterns"]) <= INTENTS

    assert gate.max_general_subject_terms == 2 and gate.rules["stopwords"] is None

    custom = IntentGate(rules={"domain_keywords": ["widget"]}, tuning={"embedding_threshold": 0.7},
                        outcomes={"intent_routes": {}}, cache_dir="off")
    assert custom.rules["domain_keywords"] == ["widget"]
    assert custom.tuning["embedding_threshold"] == 0.7
    assert custom.outcomes["intent_routes"] == {}
    assert custom.rules["refuse_patterns"] == gate.rules["refuse_patterns"]  # a key left out keeps its default
    assert DEFAULT_DOMAIN_KEYWORDS == []  # defaults are copied, never mutated


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"outcomes": {"default_route": "maybe"}}, "default_route"),
        ({"outcomes": {"intent_routes": {"chitchat": "ignore"}}}, r"intent_routes\[chitchat\]"),
        ({"rules": {"examples": {"search": ["x"]}}}, "unknown: search"),
        ({"rules": {"refuse_patterns": ["(unclosed"]}}, "'refuse_patterns' holds an invalid regular expression"),
        ({"rules": {"direct_patterns": "^hi$"}}, "'direct_patterns' must be a list"),
        ({"rules": {"intent_patterns": {"factual": "^what"}}}, r"intent_patterns\[factual\]' must be a list"),
        ({"rules": {"domain_keywords": ["ok", ""]}}, "empty or non-string keyword"),
        ({"rules": {"intent_examples": {"factual": [""]}}}, "empty or non-string example"),
        ({"rules": {"domain_keyword": ["x"]}}, r"'rules' has .*domain_keyword"),
        ({"tuning": {"embedding_threshold": "high"}}, "'tuning.embedding_threshold' must be a number"),
        ({"outcomes": ["retrieve"]}, "'outcomes' must be a mapping"),
    ],
)
def test_init_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        IntentGate(cache_dir="off", **kwargs)


def test_to_dict():
    gate = IntentGate(rules={"domain_keywords": ["widget"]}, tuning={"embedding_margin": 0.2},
                      max_general_subject_terms=4, cache_dir="off")
    data = gate.to_dict()
    assert data["type"] == "gatehouse.components.intent.intent_gate.IntentGate"
    params = data["init_parameters"]
    assert params["rules"]["domain_keywords"] == ["widget"]
    assert params["tuning"]["embedding_margin"] == 0.2
    assert params["max_general_subject_terms"] == 4
    assert params["rules"]["stopwords"] is None
    assert params["outcomes"]["default_route"] == "retrieve"
    assert params["chat_generator"] is None
    assert params["rules"]["examples"] == gate.rules["examples"]
    assert set(params["rules"]["intent_patterns"]) == set(gate.rules["intent_patterns"])


def test_from_dict():
    gate = IntentGate(
        chat_generator=MockChatGenerator(responses='{"route": "direct", "intent": "chitchat"}'),
        outcomes={"default_intent": "clarification"},
        max_general_subject_terms=1,
        rules={"stopwords": ["the", "of"]},
        cache_dir="off",
    )
    data = gate.to_dict()
    restored = IntentGate.from_dict(data)
    assert isinstance(restored.chat_generator, MockChatGenerator)
    assert restored.outcomes["default_intent"] == "clarification"
    assert restored.max_general_subject_terms == 1 and restored.rules["stopwords"] == ["the", "of"]
    assert restored.to_dict() == data

    minimal = IntentGate.from_dict({"type": "gatehouse.components.intent.intent_gate.IntentGate", "init_parameters": {}})
    assert minimal.rules["domain_keywords"] == list(DEFAULT_DOMAIN_KEYWORDS)


def test_from_dict_names_the_new_place_of_a_moved_setting():
    """A YAML written before the settings were grouped fails with the new place of each setting it uses."""
    data = {"type": "gatehouse.components.intent.intent_gate.IntentGate",
            "init_parameters": {"domain_keywords": ["widget"], "embedding_threshold": 0.7, "refusal_message": "No.",
                                "max_general_subject_terms": 2}}
    with pytest.raises(ValueError) as raised:
        IntentGate.from_dict(data)
    message = str(raised.value)
    moves = [("domain_keywords", "rules.domain_keywords"), ("embedding_threshold", "tuning.embedding_threshold"),
             ("refusal_message", "outcomes.refusal_message")]
    for old, new in moves:
        assert re.search(rf"\W{old}\W.*\W{re.escape(new)}\W", message), (old, message)
    assert "max_general_subject_terms" not in message  # still a setting of its own


def test_load_pipeline_names_the_new_place_of_a_moved_setting(tmp_path):
    path = tmp_path / "old.yml"
    path.write_text(
        "components:\n"
        "  intent:\n"
        "    type: gatehouse.components.intent.intent_gate.IntentGate\n"
        "    init_parameters:\n"
        "      general_keywords: [recursion]\n"
        "connections: []\n"
    )
    with pytest.raises(Exception, match=r"\Wgeneral_keywords\W.*\Wrules\.general_keywords\W"):
        load_pipeline(path)


@pytest.mark.parametrize(
    ("query", "route", "intent"),
    [
        ("How do I rotate an API key?", "retrieve", "procedural"),
        ("What does the Team plan cost?", "retrieve", "factual"),
        ("How do I back up the gateway database?", "retrieve", "procedural"),
        ("What is 12 * 7?", "direct", None),
        ("hello there", "direct", "chitchat"),
        ("Write a Python script that scrapes a website", "refuse", "out_of_scope"),
        ("asdkjh qwpoeiru zxmcnv", "retrieve", None),
    ],
)
def test_run_required_decisions(gate, query, route, intent):
    decided, state = route_of(gate, query)
    assert decided == route
    if intent is not None:
        assert state["intent"] == intent
    assert state["intent"] in INTENTS


@pytest.mark.parametrize(
    ("query", "route"),
    [
        ("what is 17 * 23?", "direct"),
        ("hi", "direct"),
        ("Thanks for your help!", "direct"),
        ("what does HTTP 404 mean in general", "direct"),
        ("What is the capital of France?", "direct"),
        ("How do I reverse a list in Python?", "direct"),
        ("Who wrote Hamlet?", "direct"),
        ("Can you send an email to my boss for me?", "refuse"),
        ("Book a flight to Rome", "refuse"),
        ("How do I hack into someone's account?", "refuse"),
        ("please write me a bash script that deletes old logs", "refuse"),
        ("What's your refund policy?", "retrieve"),
        ("Why does the gateway return 502?", "retrieve"),
        ("Which models are supported?", "retrieve"),
        ("How do I stop attackers from stealing my API key?", "retrieve"),
        ("Create an API key for my team", "retrieve"),
        ("What does error CGW-2003 mean?", "retrieve"),
        ("Does it support streaming?", "retrieve"),
        ("qwerty", "retrieve"),
        ("What can you do?", "direct"),
        ("Create a React component that shows our usage on a chart.", "refuse"),
        ("Can you recommend a good movie for tonight?", "refuse"),
    ],
)
def test_run_routes(gate, query, route):
    assert route_of(gate, query)[0] == route


@pytest.mark.parametrize(
    "query",
    [
        "What is 2 + 2?",
        "compute 17*3",
        "what's 2^10",
        "What is 1,000 + 2,500?",
    ],
)
def test_run_whole_question_arithmetic_is_direct(gate, query):
    route, state = route_of(gate, query)
    assert route == "direct"
    assert state["decision_tier"] == "regex"


@pytest.mark.parametrize(
    "query",
    [
        "How would one write T(n) = 7n2 + 15n + 40 in big O notation?",
        "What does error code 502-3 mean?",
        "How many users does 2 + 2 factor authentication protect?",
    ],
)
def test_run_digits_in_a_question_are_retrieved(gate, query):
    assert route_of(gate, query)[0] == "retrieve"


@pytest.mark.parametrize(
    "query",
    [
        "How did the final Song emperor die?",
        "Who ruled the Song dynasty after 1127?",
        "What was the weather like during the Black Death?",
        "Which sports does ABC broadcast on weekends?",
        "Where is the recipe collection of the Victoria and Albert Museum kept?",
    ],
)
def test_run_topic_words_in_ordinary_questions_are_not_refused(gate, query):
    route, state = route_of(gate, query)
    assert route == "retrieve"
    assert state["intent"] != "out_of_scope"


@pytest.mark.parametrize(
    ("query", "route"),
    [
        ("What is the capital of France?", "direct"),
        ("Who wrote Romeo and Juliet?", "direct"),
        ("What is big O notation?", "direct"),
        ("Who was the first Byzantine mercenary to serve with the Normans?", "retrieve"),
        ('Who wrote "On the Computational Complexity of Science"?', "retrieve"),
        ("What percentage of the population of Warsaw was Jewish in 1897?", "retrieve"),
    ],
)
def test_run_general_knowledge_only_for_short_questions(gate, query, route):
    assert route_of(gate, query)[0] == route


def test_run_general_subject_limit_from_yaml():
    strict = IntentGate(max_general_subject_terms=0, cache_dir="off")
    assert route_of(strict, "What is the capital of France?")[0] == "retrieve"
    assert route_of(strict, "How do I reverse a list in Python?")[0] == "direct"  # the pattern covers it all


@pytest.mark.parametrize(
    ("query", "intent"),
    [
        ("Compare the Pro and Team plans", "comparison"),
        ("When was the latest gateway release?", "temporal"),
        ("List all supported models", "aggregation"),
        ("Why was my request throttled?", "explanation"),
        ("How does the gateway cache work?", "explanation"),
        ("Should I pick the Pro plan or the Team plan for five people?", "opinion"),
        ("What do you mean?", "clarification"),
        ("What's the weather in Paris?", "out_of_scope"),
        ("Is there a free tier?", "factual"),
        ("Steps to set up SSO", "procedural"),
    ],
)
def test_run_intents(gate, query, intent):
    assert route_of(gate, query)[1]["intent"] == intent


def test_run_path_and_tiers(gate):
    keyed = IntentGate(rules={"domain_keywords": ["api key*"]}, cache_dir="off")
    _, retrieve = route_of(keyed, "How do I rotate an API key?")
    assert retrieve["path"] == ["start", "intent_procedural_retrieve"]
    assert retrieve["intent_tier"] == "regex"
    assert retrieve["decision_tier"] == "keywords"
    assert "api key" in retrieve["decision_reason"]

    _, direct = route_of(gate, "hello there")
    assert direct["path"] == ["start", "skip_retrieval"]
    assert direct["decision_tier"] == "regex"

    _, refused = route_of(gate, "Write a Python script that scrapes a website")
    assert refused["path"] == ["start", "refuse"]
    assert refused["validation"]["boundary_violations"]
    assert refused["validation"]["boundary_violations"][0].startswith("request refused (regex")

    _, nonsense = route_of(gate, "asdkjh qwpoeiru zxmcnv")
    assert nonsense["decision_tier"] == "default"
    assert nonsense["intent_tier"] == "default"
    assert set(nonsense["route_similarity"]) == {"direct", "retrieve", "refuse"}
    assert nonsense["latency_ms"]["intent_gate"] > 0


def test_run_out_of_scope_intent_implies_refuse(gate):
    route, state = route_of(gate, "What's the weather in Paris?")
    assert route == "refuse"
    assert state["decision_tier"] == "intent"
    assert state["status"] == "refused"
    assert state["answer"] == gate.outcomes["refusal_message"]


def test_run_intent_routes_only_from_trusted_tiers():
    gate = IntentGate(outcomes={"intent_route_tiers": []}, cache_dir="off")
    route, state = route_of(gate, "What's the weather in Paris?")
    assert state["intent"] == "out_of_scope"
    assert route == "retrieve" and state["decision_tier"] == "default"


def test_run_embedding_tier():
    gate = IntentGate(
        rules={
            "refuse_patterns": [], "direct_patterns": [], "retrieve_patterns": [], "general_knowledge_patterns": [],
            "domain_keywords": [], "refuse_keywords": [], "general_keywords": [],
            "examples": {
                "retrieve": ["How do I reset my password?", "Where do I download my invoices?"],
                "direct": ["Who painted the Mona Lisa?", "What is the boiling point of water?"],
            },
            "intent_patterns": {}, "intent_keywords": {},
            "intent_examples": {
                "procedural": ["How do I reset my password?"], "factual": ["Who painted the Mona Lisa?"],
            },
        },
        cache_dir="off",
    )
    route, state = route_of(gate, "how can I reset the password of my account")
    assert route == "retrieve"
    assert state["decision_tier"] == "embedding"
    assert state["intent"] == "procedural" and state["intent_tier"] == "embedding"
    route, state = route_of(gate, "who was the painter of the Mona Lisa")
    assert route == "direct"
    assert state["decision_tier"] == "embedding"
    assert state["route_similarity"]["direct"] > state["route_similarity"]["retrieve"]


@pytest.mark.parametrize("query", ["", "   \n\t "])
def test_run_empty_query(gate, query):
    route, state = route_of(gate, query)
    assert route == "direct"
    assert state["intent"] == "clarification"
    assert state["intent_tier"] == "empty"
    assert state["path"] == ["start", "skip_retrieval"]


def test_run_missing_query_key(gate):
    result = gate.run(state={"path": ["start"]})
    assert list(result) == ["direct"]


@pytest.mark.parametrize(
    ("query", "route"),
    [
        ("Combien coûte le plan Team ?", "retrieve"),
        ("héllo there 👋", "direct"),
        ("Wie setze ich mein Passwort zurück? 🔑", "retrieve"),
        ("こんにちは、料金プランについて教えてください", "retrieve"),
        ("What’s your refund policy?", "retrieve"),  # typographic apostrophe
    ],
)
def test_run_unicode(gate, query, route):
    assert route_of(gate, query)[0] == route


def test_run_does_not_mutate_input(gate):
    state = new_state("Write a Python script that scrapes a website")
    gate.run(state=state)
    assert state["path"] == ["start"]
    assert state["latency_ms"] == {}
    assert state["validation"]["boundary_violations"] == []
    assert "route" not in state and "intent" not in state


def test_examples_are_embedded_once_per_instance(gate):
    backend = EmbeddingBackend.get(cache_dir="off")
    route_matrix, intent_matrix = gate._tiers.route_index._matrix, gate._tiers.intent_index._matrix
    assert route_matrix is not None and intent_matrix is not None
    before = backend.encoded_count
    route_of(gate, "zzkq vvbn unique nonsense one")
    route_of(gate, "hello there")  # decided by rules: no embedding at all
    assert backend.encoded_count - before == 1
    assert gate._tiers.route_index._matrix is route_matrix


def test_run_llm_tier_decides_when_rules_defer():
    replies = []

    def reply(messages):
        replies.append(messages[-1].text)
        return 'Sure: {"route": "direct", "intent": "chitchat"}'

    gate = IntentGate(chat_generator=MockChatGenerator(response_fn=reply), cache_dir="off")
    route, state = route_of(gate, "asdkjh qwpoeiru zxmcnv")
    assert route == "direct"
    assert state["decision_tier"] == "llm" and state["intent_tier"] == "llm"
    assert len(replies) == 1 and "asdkjh qwpoeiru zxmcnv" in replies[0] and "temporal" in replies[0]

    route, state = route_of(gate, "hello there")  # rules decide: the LLM is not asked
    assert route == "direct" and len(replies) == 1


def test_run_llm_unparseable_reply_falls_back():
    gate = IntentGate(chat_generator=MockChatGenerator(responses="I cannot tell."), cache_dir="off")
    route, state = route_of(gate, "asdkjh qwpoeiru zxmcnv")
    assert route == "retrieve"
    assert state["decision_tier"] == "default"
    assert any("LLM tier failed" in w for w in state["validation"]["confidence_warnings"])


def test_run_llm_failure_falls_back():
    unreachable = OpenAIChatGenerator(
        api_key=Secret.from_token("not-a-key"), api_base_url="http://127.0.0.1:9/v1", timeout=2, max_retries=0
    )
    gate = IntentGate(chat_generator=unreachable, cache_dir="off")
    route, state = route_of(gate, "asdkjh qwpoeiru zxmcnv")
    assert route == "retrieve"
    warnings = state["validation"]["confidence_warnings"]
    assert len(warnings) == 1 and "LLM tier failed" in warnings[0]


@pytest.fixture(scope="module")
def profiled_gate(tmp_path_factory) -> IntentGate:
    from haystack import Document

    from gatehouse.document_stores.lexical_document_store import LexicalDocumentStore

    folder = tmp_path_factory.mktemp("intent-profiles")
    store = LexicalDocumentStore(backend="local", local={"path": str(folder / "store")})
    store.write_documents([
        Document(id=f"c{n}", content=text, meta={"doc_id": f"public/widgets/{doc}", "kb": "widgets",
                                                  "tenant": "public", "title": title, "section": section})
        for n, (doc, title, section, text) in enumerate([
            ("hooks.md", "Event hooks", "Request hooks", "Register a request hook with the client to log each call."),
            ("streams.md", "Streaming", "Stream responses", "Use the stream method to read a large response body."),
        ])
    ])
    component = IntentGate(profile_store=store, cache_dir="off")
    component.warm_up()
    return component


def test_run_code_request_with_the_documented_api_is_retrieved(profiled_gate):
    route, state = route_of(profiled_gate, "Write a function that registers a request hook to log each call")
    assert route == "retrieve" and state["decision_tier"] == "profile" and state["intent"] != "out_of_scope"
    assert "widgets" in state["decision_reason"]
    assert route_of(profiled_gate, "Write a Python script that scrapes a website for recipes")[0] == "refuse"


def test_run_general_cue_on_documented_words_is_retrieved(profiled_gate, gate):
    question = "How do I stream a response body in Python?"
    assert route_of(profiled_gate, question)[0] == "retrieve"
    assert route_of(gate, question)[0] == "direct"  # no profiles: a general programming question
    assert route_of(profiled_gate, "What is the capital of France?")[0] == "direct"


def test_to_dict_from_dict_with_profile_store(profiled_gate, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    data = profiled_gate.to_dict()
    assert data["init_parameters"]["profile_store"]["type"].endswith("LexicalDocumentStore")
    assert data["init_parameters"]["min_domain_coverage"] == 0.75
    assert IntentGate.from_dict(data).profile_store is not None
