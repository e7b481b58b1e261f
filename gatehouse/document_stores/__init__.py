"""Document stores: the local BM25 index, the lexical facade (local or Elasticsearch) and the dense Qdrant store."""
