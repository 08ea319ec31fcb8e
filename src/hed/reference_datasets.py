"""Former home of ``ResponsePairsDataset``, kept so that catalogs written as
``type: hed.reference_datasets.ResponsePairsDataset`` keep loading; it lives in
:mod:`hed.io.reference_datasets`."""

from hed.io.reference_datasets import ResponsePairsDataset

__all__ = ["ResponsePairsDataset"]
