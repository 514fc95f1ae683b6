"""yolo-orch: a training orchestrator for Ultralytics YOLO.

The core (spec, scaling, plan, cli) never imports torch or ultralytics; only
``orchestrator.worker`` and the launchers' child processes do.
"""

__version__ = "0.1.0"
