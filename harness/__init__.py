"""BEIR retriever benchmarking harness: exact metrics, cached embeddings, reproducible runs."""

__version__ = "0.1.0"
