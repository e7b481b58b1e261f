"""
The answer cache's second half (`cache_store` in `ask.yml`, after the output guardrails): it stores a finished answer
in the memory its request missed in (`SemanticCache`, `cache_lookup`), when the answer is worth repeating.
"""

import time

from haystack import component

from gatehouse.components.cache.answer_memory import CacheTicket
from gatehouse.components.state import State, advance


@component
class SemanticCacheStore:
    """
    Stores a finished answer in the cache its request missed (`cache_store` in `ask.yml`, after the output guardrails).

    It takes the `ticket` of `SemanticCache` (the cache's memory, the request's key and the store's write counters
    when the request began) and passes the state on with `cache.stored` set; without a ticket (a hit, an uncached
    request or one that ended before the lookup) the state passes untouched.

    Usage example:
    ```python
    from gatehouse.components.cache.semantic_cache_store import SemanticCacheStore

    state = SemanticCacheStore().run(state=finished_state, ticket=ticket)["state"]   # state["cache"]["stored"]
    ```
    """

    def __init__(self) -> None:
        """Create the component; what is stored is set on `SemanticCache`."""

    @component.output_types(state=State)
    def run(self, state: State, ticket: CacheTicket | None = None) -> dict[str, State]:
        """
        Store the answer of `state` when it is worth repeating (see `AnswerMemory.worth_storing`).

        :param state: The finished state.
        :param ticket: The lookup's ticket; None passes the state on untouched.
        :returns: `{"state": state}`, with `cache.stored` (True or False) when there was a ticket.
        """
        if ticket is None:
            return {"state": state}
        started = time.perf_counter()
        stored = ticket.memory.store(ticket, state)
        return {"state": advance(state, stage="cache", started=started,
                                 cache={**(state.get("cache") or {}), "stored": stored})}
