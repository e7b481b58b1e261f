import os
import re
from typing import Any

import pytest
from gatehouse.components.builders.response_builder import ResponseBuilder
from gatehouse.components.generators.llm_answerer import (
    DEFAULT_PASSAGE_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_USER_PROMPT,
    LLMAnswerer,
    estimate_tokens,
)
from gatehouse.components.generators.openai_compatible_generator import OpenAICompatibleChatGenerator
from gatehouse.components.generators.reply_stream import ReplyStream
from gatehouse.components.state import FALLBACK_MESSAGE, new_state
from haystack import Document, component
from haystack.dataclasses import ChatMessage, StreamingChunk
from haystack.utils import Secret

from gatehouse.llm.server import DEFAULT_URL

CLOSED_PORT_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, the connection is refused

PASSAGES = [
    Document(
        content="To rotate an API key, open Settings, select API keys and click Rotate next to the key. "
        "The old key keeps working for 24 hours.",
        meta={"source_id": "S1", "title": "API keys", "section": "Rotating a key", "source": "security/api-keys.md",
              "kb": "docs", "section_id": "rotating-a-key", "url": "https://docs.example.com/api-keys#rotating-a-key"},
    ),
    Document(
        content="Invoices are emailed on the first day of every month.",
        meta={"source_id": "S2", "title": "Billing", "source": "billing.md", "kb": "billing"},
    ),
]


@component
class RecordedReplies:
    """A chat generator that answers with the given replies in turn and records the messages it was sent."""

    def __init__(self, replies: list[ChatMessage]) -> None:
        self.replies = replies
        self.received: list[list[ChatMessage]] = []

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]) -> dict[str, Any]:
        self.received.append(messages)
        return {"replies": [self.replies[len(self.received) - 1]]}


@component
class StreamedReply:
    """A chat generator that streams one reply word by word to its `streaming_callback`, recording what it sent."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sent: list[str] = []

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], streaming_callback: Any = None) -> dict[str, Any]:
        for word in re.findall(r"\s*\S+", self.text):
            self.sent.append(word)
            if streaming_callback is not None:
                streaming_callback(StreamingChunk(content=word))
        return {"replies": [reply(self.text)]}


def reply(text: str, prompt_tokens: int = 120, completion_tokens: int = 14, cached_tokens: int = 0) -> ChatMessage:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached_tokens}}
    return ChatMessage.from_assistant(text, meta={"usage": usage, "finish_reason": "stop"})


@pytest.fixture
def llm_env(monkeypatch):
    """Start from no LLM settings; the environment is restored afterwards."""
    for name in ("GATEHOUSE_LLM_URL", "GATEHOUSE_LLM_MODEL", "GATEHOUSE_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def closed_port_generator() -> OpenAICompatibleChatGenerator:
    return OpenAICompatibleChatGenerator(api_base_url=CLOSED_PORT_URL, timeout=2, max_retries=0)


def test_init(llm_env):
    generator = closed_port_generator()
    answerer = LLMAnswerer(chat_generator=generator)
    assert answerer.chat_generator is generator
    assert answerer.prompt == {"system": DEFAULT_SYSTEM_PROMPT, "user": DEFAULT_USER_PROMPT,
                               "passage": DEFAULT_PASSAGE_TEMPLATE, "not_found_reply": "NOT_FOUND"}
    assert DEFAULT_PASSAGE_TEMPLATE == "[{source_id}] {heading}\n{content}"
    assert answerer.max_passages is None and answerer.max_passage_tokens is None
    assert answerer.fallback_message == FALLBACK_MESSAGE
    assert answerer.fallback_to_extractive is True
    assert generator.api_base_url == CLOSED_PORT_URL and generator.model == "local-model"
    assert generator.configured_api_base_url == CLOSED_PORT_URL and generator.configured_model is None
    with pytest.raises(ValueError, match="max_passages"):
        LLMAnswerer(chat_generator=generator, max_passages=0)
    with pytest.raises(ValueError, match="max_passage_tokens"):
        LLMAnswerer(chat_generator=generator, max_passage_tokens=0)
    with pytest.raises(ValueError, match="'prompt' has no setting 'system_prompt'"):
        LLMAnswerer(chat_generator=generator, prompt={"system_prompt": "Be brief."})


def test_the_prompt_asks_for_a_marker_after_every_sentence_with_examples():
    assert "[S2]" in DEFAULT_SYSTEM_PROMPT and "NOT_FOUND" in DEFAULT_SYSTEM_PROMPT
    answered, not_found = DEFAULT_SYSTEM_PROMPT.split("Answer: ")[1:]
    sentences = [s for s in answered.split("\n")[0].split(". ") if s]
    assert len(sentences) == 2 and all("[S1]" in s for s in sentences)  # the few-shot answer cites each sentence
    assert not_found == "NOT_FOUND"  # and one question the sources do not answer


def test_init_generator_reads_environment_and_never_writes_it(llm_env, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_LLM_URL", "http://127.0.0.1:8081/v1")
    monkeypatch.setenv("GATEHOUSE_LLM_MODEL", "smollm2")
    generator = OpenAICompatibleChatGenerator()
    assert generator.api_base_url == "http://127.0.0.1:8081/v1" and generator.model == "smollm2"
    assert generator.api_key.resolve_value() == "not-needed"  # a placeholder for local servers...
    assert "GATEHOUSE_LLM_API_KEY" not in os.environ  # ...passed as a Secret, never written to the environment
    monkeypatch.setenv("GATEHOUSE_LLM_API_KEY", "sk-test")
    assert OpenAICompatibleChatGenerator().api_key.resolve_value() == "sk-test"


def test_init_generator_defaults_to_the_local_server(llm_env):
    generator = OpenAICompatibleChatGenerator()
    assert generator.api_base_url == DEFAULT_URL == "http://127.0.0.1:8080/v1"  # where `gatehouse llm serve` listens


def test_to_dict(llm_env, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_LLM_URL", "http://127.0.0.1:8080/v1")
    generator = OpenAICompatibleChatGenerator(timeout=5)
    gen_dict = generator.to_dict()
    assert gen_dict == {
        "type": "gatehouse.components.generators.openai_compatible_generator.OpenAICompatibleChatGenerator",
        "init_parameters": {
            "api_base_url": None,  # configured None kept: the environment decides at load time
            "model": None,
            "api_key": {"type": "env_var", "env_vars": ["GATEHOUSE_LLM_API_KEY"], "strict": False},
            "generation_kwargs": {},
            "timeout": 5,
            "max_retries": 1,
        },
    }
    data = LLMAnswerer(chat_generator=generator, max_passages=3, fallback_to_extractive=False).to_dict()
    assert data == {
        "type": "gatehouse.components.generators.llm_answerer.LLMAnswerer",
        "init_parameters": {
            "chat_generator": gen_dict,
            "prompt": {"system": DEFAULT_SYSTEM_PROMPT, "user": DEFAULT_USER_PROMPT,
                       "passage": DEFAULT_PASSAGE_TEMPLATE, "not_found_reply": "NOT_FOUND"},
            "max_passages": 3,
            "max_passage_tokens": None,
            "fallback_message": FALLBACK_MESSAGE,
            "fallback_to_extractive": False,
        },
    }


def test_from_dict(llm_env, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*,gatehouse.document_stores.*")
    original = LLMAnswerer(
        chat_generator=OpenAICompatibleChatGenerator(api_base_url=CLOSED_PORT_URL, model="m", timeout=3,
                                                     api_key=Secret.from_env_var("MY_LLM_KEY", strict=False)),
        prompt={"passage": "<{source_id}> {content}"},
        max_passages=2,
    )
    restored = LLMAnswerer.from_dict(original.to_dict())
    assert isinstance(restored.chat_generator, OpenAICompatibleChatGenerator)
    assert restored.chat_generator.api_base_url == CLOSED_PORT_URL and restored.chat_generator.model == "m"
    assert restored.chat_generator.configured_api_key == Secret.from_env_var("MY_LLM_KEY", strict=False)
    assert restored.prompt["passage"] == "<{source_id}> {content}" and restored.max_passages == 2
    assert restored.to_dict() == original.to_dict()
    monkeypatch.setenv("GATEHOUSE_LLM_URL", "http://127.0.0.1:7777/v1")
    from_env = OpenAICompatibleChatGenerator.from_dict(OpenAICompatibleChatGenerator().to_dict())
    assert from_env.api_base_url == "http://127.0.0.1:7777/v1"


def test_from_dict_names_where_a_moved_setting_went(llm_env):
    data = LLMAnswerer(chat_generator=closed_port_generator()).to_dict()
    data["init_parameters"] = {**data["init_parameters"], "system_prompt": "Be brief.", "not_found_reply": "NONE"}
    with pytest.raises(ValueError) as raised:
        LLMAnswerer.from_dict(data)
    for old, new in [("system_prompt", "prompt.system"), ("not_found_reply", "prompt.not_found_reply")]:
        assert f"'{old}' is now '{new}'" in str(raised.value)


def test_from_dict_leaves_out_the_retired_unit_settings_with_a_warning(llm_env, caplog, monkeypatch):
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", "gatehouse.components.*")
    data = LLMAnswerer(chat_generator=closed_port_generator(), max_passages=2).to_dict()
    data["init_parameters"] = {**data["init_parameters"], "max_units": 5, "max_unit_words": 60}
    restored = LLMAnswerer.from_dict(data)
    assert restored.max_passages == 2
    assert "LLMAnswerer no longer takes 'max_units' (the model reads the first passages whole" in caplog.text


REVOKE = Document(
    content="Revoking is immediate. Open the key's menu and choose Revoke, or run `corvio keys revoke <key-id>`.",
    meta={"source_id": "S1", "title": "API keys", "section": "Revoke an API key",
          "heading_path": ["API keys", "Managing keys", "Revoke an API key"], "source": "api-keys.md"})


def test_messages_send_the_system_prompt_first_and_the_same_for_every_question():
    answerer = LLMAnswerer(chat_generator=RecordedReplies([]))
    first = answerer.messages(new_state("How do I revoke an API key?", passages=[REVOKE, *PASSAGES]))
    second = answerer.messages(new_state("When are invoices sent?", passages=list(reversed(PASSAGES))))
    assert [m.role.value for m in first] == ["system", "user"]
    assert first[0].text == second[0].text == DEFAULT_SYSTEM_PROMPT  # the prompt cache's shared prefix
    assert "{" not in DEFAULT_SYSTEM_PROMPT and "NOT_FOUND" in DEFAULT_SYSTEM_PROMPT
    for messages, question in ((first, "How do I revoke an API key?"), (second, "When are invoices sent?")):
        assert messages[1].text.endswith(f"\n\nQuestion: {question}\nAnswer:")  # the question last
        assert question not in messages[0].text


def test_messages_send_the_first_passages_whole_with_their_heading_paths():
    answerer = LLMAnswerer(chat_generator=RecordedReplies([]), max_passages=2)
    _, user = answerer.messages(new_state("How do I revoke an API key?", passages=[REVOKE, *PASSAGES]))
    assert user.text.startswith(f"[S1] API keys › Managing keys › Revoke an API key\n{REVOKE.content}\n\n"
                                f"[S1] API keys › Rotating a key\n{PASSAGES[0].content}\n\nQuestion:")
    assert "Invoices" not in user.text  # max_passages: the first two only
    [_, plain] = LLMAnswerer(chat_generator=RecordedReplies([])).messages(new_state("When are invoices sent?",
                                                                                    passages=PASSAGES))
    assert "[S2] Billing\nInvoices are emailed" in plain.text  # no heading path: the document's title


def test_messages_fit_the_passage_budget_passage_by_passage_and_cut_only_the_first():
    long = Document(content=" ".join(f"word{n}." for n in range(200)), meta={"source_id": "S1", "title": "Long"})
    short = Document(content="Keys expire after 90 days.", meta={"source_id": "S3", "title": "Expiry"})
    first = estimate_tokens(f"[S1] API keys › Rotating a key\n{PASSAGES[0].content}")  # 14 for S2, 10 for S3
    answerer = LLMAnswerer(chat_generator=RecordedReplies([]), max_passage_tokens=first + 12)
    sent = answerer.sent_passages([PASSAGES[0], PASSAGES[1], short])
    assert [d.meta["source_id"] for d in sent] == ["S1", "S3"]  # S2 does not fit after S1, the shorter S3 does
    assert sent[0].content == PASSAGES[0].content  # whole
    [cut] = answerer.sent_passages([long, short])  # the first passage alone is over the budget: cut to it
    assert cut.content.startswith("word0. word1.") and cut.content.endswith(" …") and len(cut.content) < 200
    assert estimate_tokens(answerer.messages(new_state("q", passages=[long]))[1].text) <= first + 12 + 8
    assert estimate_tokens("Run `corvio keys revoke <key-id>`.") == 12  # words and punctuation marks


def test_messages_ask_the_standalone_question():
    answerer = LLMAnswerer(chat_generator=RecordedReplies([]), max_passages=1)
    state = new_state("revoke it", passages=PASSAGES, original_query="and how do I revoke it?",
                      condensed_query="how do I revoke an API key?")
    _, user = answerer.messages(state)
    assert user.text.endswith("Question: how do I revoke an API key?\nAnswer:")


@pytest.mark.parametrize(("written", "normalized"), [
    ("Click Rotate [1]. Keys last 24 hours [2].", "Click Rotate [S1]. Keys last 24 hours [S2]."),
    ("Answer: Click Rotate (S1).", "Click Rotate [S1]."),
    ("Click Rotate [Source 1] and wait (S1, S2).", "Click Rotate [S1] and wait [S1, S2]."),
    ("Click Rotate [S 1][s2].", "Click Rotate [S1][S2]."),
    ("Click Rotate [S1].", "Click Rotate [S1]."),
    ("Read `items[2]` of the list [2].", "Read `items[2]` of the list [S2]."),
    ("[SS1] Coverage must reach 100%.", "Coverage must reach 100%. [S1]"),
    ("[S1] Keys expire. They rotate. [S2]", "Keys expire. [S1] They rotate. [S2]"),
])
def test_normalize_markers(written, normalized):
    assert LLMAnswerer.normalize_markers(written) == normalized


def test_run_answers_with_markers_and_counts_tokens():
    generator = RecordedReplies([reply("Open Settings and click Rotate (S1).", 300, 12, cached_tokens=250)])
    state = new_state("How do I rotate an API key?", passages=PASSAGES,
                      usage={"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45})  # an earlier LLM tier
    out = LLMAnswerer(chat_generator=generator).run(state=state)["state"]
    assert out["answer"] == "Open Settings and click Rotate [S1]."
    assert out["generator"] == "llm" and out["path"] == ["start", "generate_llm"]
    assert out["usage"] == {"prompt_tokens": 340, "completion_tokens": 17, "total_tokens": 357,
                            "cached_prompt_tokens": 250}  # the server's prompt_tokens_details.cached_tokens
    assert "generation" in out["latency_ms"] and "status" not in out
    assert state["usage"]["prompt_tokens"] == 40 and "answer" not in state  # input not mutated
    response = ResponseBuilder().run(state={**out, "route": "retrieve"})["response"]
    assert response["metadata"]["usage"] == out["usage"]
    assert ResponseBuilder().run(state=new_state("q", answer="a"))["response"]["metadata"]["usage"] is None


def test_run_streaming_hands_on_the_reply_unasked_and_answers_the_same_when_followed():
    text = "Open Settings and click Rotate (S1). The old key works for 24 hours [2]."
    plain = LLMAnswerer(chat_generator=StreamedReply(text)).run(state=new_state("How?", passages=PASSAGES))["state"]
    generator = StreamedReply(text)
    out = LLMAnswerer(chat_generator=generator).run(state=new_state("How?", passages=PASSAGES),
                                                    streaming_callback=lambda chunk: None)["state"]
    assert isinstance(out["reply"], ReplyStream) and "answer" not in out and generator.sent == []  # not asked yet
    seen: list[str] = []
    answered = out["reply"].follow(seen.append)
    assert answered["answer"] == plain["answer"] == "Open Settings and click Rotate [S1]. The old key works for 24 hours [S2]."
    assert seen[-1] == plain["answer"] and len(seen) == len(generator.sent)  # the reply so far, markers normalised
    assert "reply" not in answered and answered["path"] == plain["path"]


def test_run_streaming_with_a_generator_that_cannot_stream_answers_at_once():
    out = LLMAnswerer(chat_generator=RecordedReplies([reply("Click Rotate [S1].")])).run(
        state=new_state("How?", passages=PASSAGES), streaming_callback=lambda chunk: None)["state"]
    assert out["answer"] == "Click Rotate [S1]." and "reply" not in out


def test_run_not_found_reply_is_the_fallback():
    out = LLMAnswerer(chat_generator=RecordedReplies([reply("NOT_FOUND.", 200, 3)])).run(
        state=new_state("Can I pay with PayPal?", passages=PASSAGES))["state"]
    assert out["status"] == "fallback" and out["fallback"] is True and out["answer"] == FALLBACK_MESSAGE
    assert out["path"] == ["start", "generate_llm", "llm_not_found"]
    assert out["usage"] == {"prompt_tokens": 200, "completion_tokens": 3, "total_tokens": 203, "cached_prompt_tokens": 0}


def test_run_empty_reply_falls_back_to_extractive():
    out = LLMAnswerer(chat_generator=RecordedReplies([reply("  ")])).run(
        state=new_state("How do I rotate an API key?", passages=PASSAGES))["state"]
    assert out["generator"] == "extractive" and out["path"][-1] == "generate_llm_failed"
    assert out["validation"]["confidence_warnings"] == ["The language model did not answer. Answered extractively instead."]
    assert out["status"] == "partial"


def test_run_llm_down_falls_back_to_extractive(llm_env):
    state = new_state("How do I rotate an API key?", passages=PASSAGES)
    out = LLMAnswerer(chat_generator=closed_port_generator()).run(state=state)["state"]
    assert out["generator"] == "extractive"
    assert "Rotate" in out["answer"] and "[S1]" in out["answer"]
    assert out["path"][-1] == "generate_llm_failed"
    assert "generate_extractive" in out["path"]
    [warning] = out["validation"]["confidence_warnings"]
    assert warning == "The language model did not answer. Answered extractively instead."  # no exception text
    assert "generation" in out["latency_ms"] and "usage" not in out
    assert out["status"] == "partial"  # a degraded answer never reports success
    assert state["validation"]["confidence_warnings"] == [] and "answer" not in state  # input not mutated


def test_run_llm_down_without_fallback_is_error(llm_env):
    state = new_state("How do I rotate an API key?", passages=PASSAGES)
    out = LLMAnswerer(chat_generator=closed_port_generator(), fallback_to_extractive=False).run(state=state)["state"]
    assert out["status"] == "error" and out["answer"] == ""
    assert out["error_message"] == "The language model did not answer."
    assert out["path"] == ["start", "generate_llm_failed"]
    assert "generator" not in out


def test_run_real_xllamacpp_server(llm_env, smollm2_url):
    generator = OpenAICompatibleChatGenerator(
        api_base_url=smollm2_url,
        generation_kwargs={"temperature": 0.0, "max_tokens": 48},
        timeout=120,
        max_retries=0,
    )
    answerer = LLMAnswerer(chat_generator=generator, fallback_to_extractive=False)
    out = answerer.run(state=new_state("How do I rotate an API key?", passages=PASSAGES))["state"]
    assert out["generator"] == "llm" and out["answer"].strip()
    assert out["path"][-1] in ("generate_llm", "llm_not_found")
    assert out["validation"]["confidence_warnings"] == []
    usage = out["usage"]  # the server's own counts: the prompt holds the system prompt and both passages
    assert usage["prompt_tokens"] > 300 and 0 < usage["completion_tokens"] <= 48
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # the system prompt comes first and is the same for every request: the next one reads it from the prompt cache
    again = answerer.run(state=new_state("How long is a rotated key valid?", passages=PASSAGES))["state"]["usage"]
    system = len(DEFAULT_SYSTEM_PROMPT.split())
    assert again["cached_prompt_tokens"] >= system and again["cached_prompt_tokens"] < again["prompt_tokens"]
