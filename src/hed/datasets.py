"""Former home of HED's catalog datasets, kept so that catalogs written as
``type: hed.datasets.ArrowParquetDataset`` keep loading; they live in :mod:`hed.io.datasets`."""

from hed.io.datasets import (
    ArrowParquetDataset,
    PromptFileDataset,
    PublishedArtifactsDataset,
    ShardPartsDataset,
)

__all__ = [
    "ArrowParquetDataset",
    "PromptFileDataset",
    "PublishedArtifactsDataset",
    "ShardPartsDataset",
]
