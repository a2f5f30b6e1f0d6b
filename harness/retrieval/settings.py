"""What the retrieval stage needs, for dense and lexical retrievers alike."""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import HarnessError


@dataclass(frozen=True)
class RetrievalSettings:
    """How deep to rank, with which index, and whether a document may answer a query of the same id."""

    top_k: int = 1000
    index: str = "Flat"  # FAISS factory string (dense models only): Flat is exact
    # None: the dataset's registry rule (BEIR drops a hit whose id equals the query's on some datasets).
    drop_identical_ids: bool | None = None

    def __post_init__(self) -> None:
        if self.top_k <= 0:
            raise HarnessError(f"--top-k must be a positive number of documents, got {self.top_k}")

    def drops_identical_ids(self, dataset_default: bool) -> bool:
        """The identical-id rule in force: this setting, else the dataset's."""
        return dataset_default if self.drop_identical_ids is None else self.drop_identical_ids
