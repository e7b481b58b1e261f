"""
Open WebUI's background tasks, recognised in a chat request and answered without running the ask pipeline.

After each answer Open WebUI asks the chat's model for a chat title, tags and follow-up suggestions (and, with web
search or files, search queries). Each is one user message holding a task prompt: `### Task:`, the instructions, a
`### Output:` section naming the JSON object to reply with (`{ "title": ... }`, `{ "tags": [...] }`,
`{ "follow_ups": [...] }`, `{ "queries": [...] }`) and the conversation between `<chat_history>` and
`</chat_history>` (`USER: ...`, `ASSISTANT: ...`). Nothing else marks them: Open WebUI keeps its task name to itself
(`metadata.task` is removed before the request leaves it). Sent to the ask pipeline, such a prompt is an instruction
to the assistant, which its input guardrails refuse as a prompt injection.

`client_task` recognises Open WebUI's default task prompts by that structure, and `reply` answers them at once: the
title is the conversation's first question, shortened, passed through the caller's `screen` (the server's input
guardrails: cleaned, personal data redacted) and stripped of markup (`plain_text`: no `<script>`, no remote image);
tags, follow-ups and search queries are declined with an empty list (Open WebUI then keeps the chat untagged, shows
no suggestions, searches nothing). No retrieval, no language model: the reply is made from the caller's own words. A
prompt that does not have the structure (another client's, an administrator's own task template) is a question like
any other; so is one whose `instructions` (the prompt outside its chat history) the input guardrails refuse, which
the server decides (`gatehouse.serving.wrappers`).

Usage:
```python
from gatehouse.serving.client_tasks import client_task

task = client_task([{"role": "user", "content": prompt}])   # None: not a task prompt
if task is not None:
    task.kind, task.reply()       # "title", '{"title": "How do I rotate an API key"}'
    task.response(screen=redact)  # the same reply as a response contract, the title passed through `redact`
```
"""

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gatehouse.components.guardrails.sanitising import plain_text
from gatehouse.components.printable import printable
from gatehouse.components.text_units import shortened

#: The JSON key each task replies with, as Open WebUI's default prompts name it.
TASK_KEYS = ("title", "tags", "follow_ups", "queries")
TITLE_CHARS = 50
#: A longer message is not taken for a task prompt (Open WebUI's hold a few messages of history): it is a question,
#: and the question's own bound (`max_query_chars`) answers it.
MAX_TASK_CHARS = 100_000
_TASK = re.compile(r"###[ \t]*Task:[ \t]*\n")
_OUTPUT = re.compile(r"^###[ \t]*Output:", re.MULTILINE)
_KEY = re.compile(r'\{\s*"(' + "|".join(TASK_KEYS) + r')"\s*:')
_TURN = re.compile(r"^(USER|ASSISTANT|SYSTEM): ?", re.MULTILINE)


@dataclass(frozen=True)
class ClientTask:
    """A recognised task: its kind (a `TASK_KEYS` entry), its instructions (the prompt before its chat history) and
    the conversation it is about (`[(role, text)]`)."""

    kind: str
    instructions: str
    history: list[tuple[str, str]]

    def reply(self, screen: Callable[[str], str] = printable) -> str:
        """
        The JSON object Open WebUI parses: a title from the first question, an empty list for the others.

        :param screen: Applied to the question before it becomes the title (the server passes its input guardrails'
            cleaning and redaction).
        """
        if self.kind != "title":
            return json.dumps({self.kind: []})
        question = next((text for role, text in self.history if role == "user"), "")
        return json.dumps({"title": short_title(plain_text(screen(question)))}, ensure_ascii=False)

    def response(self, screen: Callable[[str], str] = printable) -> dict[str, Any]:
        """The reply as a response contract (`status` success, `path` `["client_task"]`, `metadata.client_task`)."""
        return {"answer": self.reply(screen), "citations": [], "metadata": {"client_task": self.kind},
                "status": "success", "error_message": None, "path": ["client_task"],
                "validation": {"boundary_violations": [], "confidence_warnings": [], "guardrail_actions": [],
                               "unsupported_sentences": []}}


def client_task(turns: list[dict[str, str]]) -> ClientTask | None:
    """
    The Open WebUI task a chat request is, if it is one.

    :param turns: The request's user and assistant turns (`role`, `content` as text), system messages left out.
    :returns: The task, or None for a request that is not a single user message holding a task prompt (of at most
        `MAX_TASK_CHARS` characters).
    """
    if len(turns) != 1 or turns[0]["role"] != "user" or len(turns[0]["content"]) > MAX_TASK_CHARS:
        return None
    prompt = turns[0]["content"].strip()
    opens, closes = prompt.find("<chat_history>"), prompt.rfind("</chat_history>")
    if not _TASK.match(prompt) or opens < 0 or closes < opens or prompt[closes:] != "</chat_history>":
        return None
    output = _OUTPUT.search(prompt, 0, opens)
    section_end = prompt.find("\n###", output.end(), opens) if output else -1
    key = _KEY.search(prompt, output.end(), section_end if section_end >= 0 else opens) if output else None
    if key is None:
        return None
    return ClientTask(kind=key.group(1), instructions=prompt[:opens],
                      history=_turns(prompt[opens + len("<chat_history>"):closes]))


def _turns(history: str) -> list[tuple[str, str]]:
    """The `ROLE: text` messages of a chat history (a message may span lines), as `(role, text)`."""
    starts = list(_TURN.finditer(history))
    return [(start.group(1).lower(), history[start.end():end].strip())
            for start, end in zip(starts, [s.start() for s in starts[1:]] + [len(history)])]


def short_title(question: str, limit: int = TITLE_CHARS) -> str:
    """
    A chat title from a question: its first line, whitespace normalised, without a closing `?`, `.` or `!`, cut at a
    word and ended with "…" when longer than `limit`.

    :param question: The user's question.
    :param limit: The longest title.
    :returns: The title, printable; empty for an empty question.
    """
    line = next((line for line in question.splitlines() if line.strip()), "")
    return shortened(" ".join(printable(line).split()).rstrip("?.! "), limit)
