"""XLA (TPU) training backend for Ultralytics detection models.

Ultralytics rejects XLA devices, and its loss has data-dependent shapes (see ``loss.py``). This
module trains an Ultralytics ``DetectionModel`` on XLA with Ultralytics' own machinery wherever it
can be reused unchanged:

- ``XLADetectionTrainer`` subclasses Ultralytics' ``DetectionTrainer`` (constructed with
  ``device='cpu'`` so Ultralytics' device parsing is happy) and only replaces ``_setup_train``,
  ``_do_train``, ``optimizer_step`` and checkpoint writing. Reused as is: config/args handling,
  ``check_resume``, dataset check, ``build_dataset`` (same augmentation), ``get_model``/
  ``setup_model``, ``build_optimizer`` (param groups: decay on weights only), ``_setup_scheduler``
  (linear / cosine LambdaLR with lrf), ``_get_warmup_iterations``, ``set_class_weights``,
  ``_close_dataloader_mosaic``, ``resume_training``, ``save_metrics`` (results.csv),
  ``EarlyStopping``, ``ModelEMA``, ``DetectionValidator`` and ``strip_optimizer``.
- The training step: the padded batch (``data.py``) goes through ``MpDeviceLoader``; forward,
  ``XLADetectionLoss`` (``loss.py``), backward, and on optimizer steps: all-reduce
  (``xm.reduce_gradients``), ``clip_grad_norm_(10)``, ``optimizer.step()``, EMA update. It is one
  traced graph per iteration, cut by the loader's ``torch_xla.sync()``; nothing reads a device
  value inside the epoch. Warmup (np.interp of lr/momentum/accumulate), accumulation to ``nbs``
  and weight decay ``weight_decay*batch*accumulate/nbs`` are Ultralytics' formulas with
  ``batch`` the TOTAL batch over all cores.
- Validation runs at epoch end on the host CPU from the EMA weights, with Ultralytics'
  ``DetectionValidator`` in its in-training mode (val losses included), so metrics are Ultralytics'.
  The final evaluation validates ``best.pt`` exactly like ``BaseTrainer.final_eval``.

Graph count: with ``accumulate == 1`` and no warmup, ONE step graph, compiled at step 0 and reused
by every later step, whatever the box counts; warmup and accumulation add a few fixed variants
(table in docs/tpu.md).

Modules: ``run`` (``train_xla(...)``, the ``python -m orchestrator.worker.xla.run`` CLI, one process
or one per core), ``trainer`` (``XLADetectionTrainer``), ``loss`` (the fixed-shape detection loss),
``data`` (padded fixed-size batches), ``checkpoint`` (Ultralytics-format last.pt / best.pt), ``graph``
(rewrites that keep one graph per step), ``metrics`` (compile counts, step times).

Importing this package does not import torch_xla; ``run.train_xla`` does, when it runs.
"""

