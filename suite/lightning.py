"""Lightning set-up shared by every job: quiet loggers and one quiet ``Trainer``.

Lightning is imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
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
    """A ``Trainer`` with :data:`QUIET` and ``overrides`` (which win), banners silenced.

    Inside a cell (:func:`sparsebench.suite.job.cell_folder`), what the module logs (losses,
    accuracies per epoch) goes to ``metrics.csv`` next to the cell's record through
    Lightning's ``CSVLogger``: the cell's learning curve (``sparsebench curves`` plots it)."""
    import lightning.pytorch as pl

    from sparsebench.suite.job import cell_folder

    quiet_lightning()
    settings = {**QUIET, **overrides}
    folder = cell_folder()
    if folder is not None and "logger" not in overrides:
        from lightning.pytorch.loggers import CSVLogger

        settings["logger"] = CSVLogger(save_dir=str(folder), name="", version="")
    return pl.Trainer(**settings)


@contextmanager
def runtime_cuda_check() -> Iterator[None]:
    """Within it, ``torch.cuda.is_available()`` asks the CUDA runtime, which torch caches,
    instead of NVML. Lightning sets ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` when imported (a check
    that leaves the process free to fork), and torch's Adam asks that question at every
    ``step()``: through NVML it loads and initialises the library again each time, about
    0.2-0.9 ms a step on a CPU job, as long as a small model's whole step. Meant around
    ``Trainer.fit``: a fit forks nothing, and on a GPU CUDA is initialised by then anyway."""
    name = "PYTORCH_NVML_BASED_CUDA_CHECK"
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved
