"""
The PostgreSQL store of the dense and lexical facades, imported only when PostgreSQL is configured (its client
libraries are the optional `gatehouse[postgres]`).

Usage:
```python
from gatehouse.document_stores.postgres_store_of import postgres_store

store = postgres_store({"table": "gatehouse_chunks"}, embedding_dim=384)   # the URL from GATEHOUSE_POSTGRES_URL
```
"""

from typing import Any


def postgres_store(init_parameters: dict[str, Any], **defaults: Any) -> Any:
    """
    A `PostgresDocumentStore` of `init_parameters` (over `defaults`).

    :raises RuntimeError: When `pgvector-haystack` is not installed, saying how to install it.
    """
    try:
        from gatehouse.document_stores.postgres_document_store import PostgresDocumentStore
    except ImportError as error:
        raise RuntimeError("PostgreSQL is configured but 'pgvector-haystack' is not installed: "
                           "pip install 'gatehouse[postgres]'.") from error
    return PostgresDocumentStore(**{**defaults, **init_parameters})
