"""Lightning set-up shared by every job: quiet loggers and one quiet ``Trainer``.

Lightning is imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lightning.pytorch as pl

# A job writes one record; Lightning's own outputs (logs, checkpoints, bars, summaries) would
# be noise in the job log and stray files in the working folder.
QUIET: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def quiet_lightning() -> None:
    """Silence Lightning's per-job banners (accelerator, workers) in the job logs."""
    import logging
    import warnings

    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*GPU available but not used.*")


def quiet_trainer(**overrides: Any) -> pl.Trainer:
    """A ``Trainer`` with :data:`QUIET` and ``overrides`` (which win), banners silenced."""
    import lightning.pytorch as pl

    quiet_lightning()
    return pl.Trainer(**{**QUIET, **overrides})
