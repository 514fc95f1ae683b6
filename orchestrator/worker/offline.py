"""Make Ultralytics run offline, deliberately, in the training process.

Ultralytics reaches the network in a few places even for local training: version
checks and analytics (stopped by YOLO_OFFLINE=1), the plot font download (it issues
a HEAD request even when offline), the CUDA AMP check (downloads a model) and the
integrations it switches on from its settings. We give the training process its own
Ultralytics config dir with integrations off and fonts already present.
Call `prepare_env()` BEFORE importing ultralytics."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from orchestrator.data.cache import cache_dir
from orchestrator.rundir.tracking import EVERY_ULTRALYTICS_INTEGRATION as INTEGRATIONS

FONTS = ("Arial.ttf", "Arial.Unicode.ttf")


def config_dir() -> Path:
    return cache_dir() / "ultralytics-config"


def prepare_env() -> Path:
    os.environ["YOLO_OFFLINE"] = "1"
    os.environ["YOLO_AUTOINSTALL"] = "false"  # never pip-install at run time
    os.environ.setdefault("YOLO_CONFIG_DIR", str(config_dir()))
    settings_dir = Path(os.environ["YOLO_CONFIG_DIR"]) / "Ultralytics"
    settings_dir.mkdir(parents=True, exist_ok=True)
    _provision_fonts(settings_dir)
    return settings_dir


def _provision_fonts(settings_dir: Path) -> None:
    """Plots need Arial; ship matplotlib's DejaVu Sans under that name instead of downloading."""
    missing = [name for name in FONTS if not (settings_dir / name).exists()]
    if not missing:
        return
    try:
        import matplotlib

        source = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    except ImportError:
        return
    for name in missing:
        # A temp file of its own: the ranks of a torchrun job all get here at once on a fresh
        # cache, and a shared temp name let one rank rename away the file another was writing.
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=settings_dir)
        os.close(fd)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a font is not
        shutil.copyfile(source, tmp)
        os.replace(tmp, settings_dir / name)


# What keeps an integration the job switched on off the network unless its user configured it:
# Comet and ClearML log offline (their own variables; a user's value wins).
OFFLINE_UNLESS_SET = {"comet": {"COMET_MODE": "offline"}, "clearml": {"CLEARML_OFFLINE_MODE": "1"}}


def disable_integrations(wanted_on: tuple[str, ...] = ()) -> None:
    """After importing ultralytics: its own loggers off (we log W&B ourselves), no sync, but for the ones
    the job lists in `integrations` (switched on here, offline unless configured: OFFLINE_UNLESS_SET)."""
    from ultralytics.utils import SETTINGS

    wanted = {key: key in wanted_on for key in INTEGRATIONS}
    wanted["sync"] = False
    for name in wanted_on:
        for key, value in OFFLINE_UNLESS_SET.get(name, {}).items():
            os.environ.setdefault(key, value)
    if any(SETTINGS.get(k) != v for k, v in wanted.items()):
        SETTINGS.update(wanted)


def skip_amp_download_check() -> None:
    """Ultralytics' AMP check downloads a model; offline we trust AMP on CUDA instead."""
    import ultralytics.engine.trainer as trainer_module

    trainer_module.check_amp = lambda model, *a, **k: True
