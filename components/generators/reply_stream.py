"""A language model's answer not asked for yet: followed while the model writes it (verified streaming)."""

from collections.abc import Callable
from typing import Any

from gatehouse.components.state import State


class ReplyStream:
    """
    What `LLMAnswerer` hands on when it is asked to stream: its answer, not asked for yet. Whoever follows it (the
    citation verifier's `VerifiedReply`, driven by the output guardrails) asks the model, is told the reply so far each
    time it grows, and gets the generator's state with the answer, exactly as the answerer would have returned it.
    It is followed once; Haystack hands it on as itself (a copy would ask the model again).

    Usage:
    ```python
    stream = answerer.run(state=state, streaming_callback=callback)["state"]["reply"]
    answered = stream.follow(lambda text: print(text))   # the reply so far, markers written as the answer's
    answered["answer"]
    ```
    """

    def __init__(self, answer: Callable[[Callable[[str], None]], State]) -> None:
        """
        :param answer: Asks the model, telling its argument the reply so far as it grows; returns the state with the
            answer.
        """
        self._answer = answer

    def follow(self, on_text: Callable[[str], None]) -> State:
        """
        Ask the model and follow its reply.

        :param on_text: Told the reply so far (markers as the answer will have them) each time it grows.
        :returns: The generator's state with the answer (or its fallback when the model failed).
        """
        return self._answer(on_text)

    def __deepcopy__(self, memo: dict[int, Any]) -> "ReplyStream":
        return self
