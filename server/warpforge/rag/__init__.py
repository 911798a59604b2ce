"""Retrieval of real CUDA code for the LLM planner: chunking, tagging, an embedded and a shared backend."""

from .backends import default_index_path, open_index
from .index import (
    Backend,
    Chunk,
    Hit,
    Index,
    Query,
    chunk_directory,
    chunk_source,
    op_type,
    pattern_tags,
    query_for_kernel,
)

__all__ = [
    "Backend",
    "Chunk",
    "Hit",
    "Index",
    "Query",
    "chunk_directory",
    "chunk_source",
    "default_index_path",
    "op_type",
    "open_index",
    "pattern_tags",
    "query_for_kernel",
]
