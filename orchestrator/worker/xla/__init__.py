"""XLA (TPU) training backend for Ultralytics detection models.

- ``loss``: fixed-shape version of Ultralytics' detection loss (same values, no data-dependent shapes)
- ``data``: padded fixed-size batches over Ultralytics' own dataset
- ``checkpoint``: Ultralytics-format last.pt / best.pt
- ``trainer``: ``train_xla(...)`` and the ``python -m orchestrator.worker.xla.trainer`` CLI

Importing this package does not import torch_xla; ``trainer.train_xla`` does, when it runs.
"""
