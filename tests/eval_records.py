"""
Hand-made per-case records for the evaluation tests (metrics, report, verdict), in the runner's record format.

Four cases of one set, chosen so that every Gatehouse metric has a value worked out by hand (see
tests/test_eval_metrics.py for the arithmetic):

- q1: answerable, answered with two citations; one of its two marked sentences is unsupported.
- q2: unanswerable, Gatehouse fell back (a correct abstention).
- q3: answerable, but refused as out of scope (a wrong abstention, wrong intent and route); its question is
  HTML that the report must escape.
- q4: unanswerable, but answered with invented citations (a citation of a passage that was not retrieved and
  a marker without a citation), routed to two KBs.
"""

import copy

SCRIPT_QUESTION = "<script>alert('x')</script> How much is the Team plan?"
FALLBACK = "I could not find this in the knowledge bases."


def _response(answer, *, status, intent, route, kb, attempts, latency, citations=(), unsupported=(), actions=()):
    return {
        "answer": answer,
        "citations": [
            {
                "id": cid,
                "text": "",
                "url": "",
                "chunk_id": f"{cid}-chunk",
                "source": source,
                "kb": kb_name,
                "confidence": 1.0,
                "snippet": "",
            }
            for cid, kb_name, source in citations
        ],
        "metadata": {
            "mode": "full-corpus",
            "intent": intent,
            "route": route,
            "kb": kb,
            "tenant": "public",
            "chunks_retrieved": 0,
            "chunks_used": 0,
            "attempts": attempts,
            "quality_score": None,
            "generator": "extractive",
            "latency_ms": latency,
        },
        "validation": {
            "boundary_violations": [],
            "confidence_warnings": [],
            "guardrail_actions": list(actions),
            "unsupported_sentences": list(unsupported),
        },
        "status": status,
        "error_message": None,
        "path": [],
    }


def _gold(answer, sources, contexts, kb, answerable, intent="factual", route="retrieve"):
    return {
        "answer": answer,
        "sources": sources,
        "contexts": contexts,
        "kb": kb,
        "intent": intent,
        "route": route,
        "answerable": answerable,
    }


RECORDS = [
    {
        "set": "handmade",
        "id": "q1",
        "question": "When do API keys expire?",
        "tags": [],
        "gold": _gold(
            "Keys expire after 90 days.",
            ["faq/api-keys.md", "faq/security.md"],
            ["API keys expire after 90 days."],
            "faq",
            True,
        ),
        "response": _response(
            "API keys expire after 90 days. [S1] Rotate them in Settings. [S2]",
            status="success",
            intent="factual",
            route="retrieve",
            kb="faq",
            attempts=1,
            latency={"intent": 10.0, "retrieval": 100.0, "total": 200.0},
            citations=[("S1", "faq", "api-keys.md"), ("S2", "faq", "billing.md")],
            unsupported=["Rotate them in Settings."],
            actions=["removed_invalid_citation:S9"],
        ),
        "retrieved": [
            {"source": "faq/api-keys.md", "text": "API keys expire after 90 days."},
            {"source": "faq/billing.md", "text": "Invoices are sent monthly."},
            {"source": "faq/api-keys.md", "text": "Rotate keys in Settings."},
        ],
    },
    {
        "set": "handmade",
        "id": "q2",
        "question": "What is the on-call rota for ops?",
        "tags": ["no-kb-answers"],
        "gold": _gold(None, [], [], "ops", False),
        "response": _response(
            FALLBACK,
            status="fallback",
            intent="factual",
            route="retrieve",
            kb="ops",
            attempts=3,
            latency={"intent": 20.0, "retrieval": 300.0, "total": 400.0},
        ),
        "retrieved": [],
    },
    {
        "set": "handmade",
        "id": "q3",
        "question": SCRIPT_QUESTION,
        "tags": [],
        "gold": _gold(
            "The Team plan costs 49 dollars per month.",
            ["product/pricing.md"],
            ["The Team plan costs 49 dollars per month."],
            "product",
            True,
        ),
        "response": _response(
            "I can only answer questions about Corvio.",
            status="refused",
            intent="out_of_scope",
            route="refuse",
            kb=None,
            attempts=0,
            latency={"intent": 30.0, "total": 50.0},
        ),
        "retrieved": [],
    },
    {
        "set": "handmade",
        "id": "q4",
        "question": "When does Project Quasar launch?",
        "tags": ["no-kb-answers"],
        "gold": _gold(None, [], [], "faq", False),
        "response": _response(
            "Quasar launches in May. [S1] [S3]",
            status="success",
            intent="factual",
            route="retrieve",
            kb="faq+product",
            attempts=2,
            latency={"intent": 40.0, "retrieval": 200.0, "total": 600.0},
            citations=[("S1", "product", "roadmap.md")],
            actions=["redacted_pii:email"],
        ),
        "retrieved": [{"source": "faq/api-keys.md", "text": "API keys expire after 90 days."}],
    },
]


def records():
    """A fresh copy of the hand-made records."""
    return copy.deepcopy(RECORDS)
