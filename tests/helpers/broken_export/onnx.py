"""onnx as installed, except in an export process (`python -m orchestrator.worker.export`), where its import
fails: an export that breaks after the plan's check passed (a package upgraded or damaged during the training).
On PYTHONPATH ahead of site-packages; anywhere else it hands over to the real package."""

import os
import sys

if "orchestrator.worker.export" in sys.orig_argv:
    raise ImportError("onnx is damaged (the test's stand-in for a package broken during the run)")
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules[__name__]
import onnx as _real  # noqa: E402  the installed package, which the import machinery returns in this one's place

sys.modules[__name__] = _real
