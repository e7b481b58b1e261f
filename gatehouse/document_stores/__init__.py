"""Document stores: the embedded Qdrant shard (dense and BM25 vectors) and the dense and lexical facades over it or servers."""
