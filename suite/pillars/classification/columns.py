"""The columns of the classification pillar's runs table: plain data, so that the pillar and its
jobs import them without pandera and polars (only validation needs those)."""

from __future__ import annotations

# Columns of a classification record besides the common ones; units in the comments.
COLUMNS: dict[str, type] = {
    "family": str,  # dst | pruning: the method family
    "task": str,
    "dataset": str,
    "model": str,
    "execution": str,  # how sparse layers run: dense_mask (dense x mask) or a kernel backend
    "target_sparsity": float,
    "actual_sparsity": float,  # from the masks, over prunable weights
    "test_acc": float,  # fraction in [0, 1]
    "test_loss": float,
    "val_acc": float,
    "val_loss": float,
    "epochs": int,
    "steps": int,
    "train_flops": float,  # FLOPs (2 x MACs) over all training steps
    "inference_flops": float,  # FLOPs of one forward pass of one example
    "train_flops_rel_dense": float,
    "inference_flops_rel_dense": float,
    "params_total": int,  # all parameters (weights, biases, norms)
    "params_nonzero": int,  # parameters not removed by a mask
    "train_wall_s": float,  # seconds of Trainer.fit
    "infer_ms": float,  # median milliseconds of one forward pass of infer_batch examples
    "infer_batch": int,
    "layer_densities_json": str,  # layer name -> density at the end of training
    # The layer-wise allocation the method STARTS from (erk | uniform | global); null for dense.
    "distribution": str,
    # How its layer densities are set at the END (MaskMethod.final_allocation): the start's
    # (erk | uniform), global (ranked jointly, e.g. GraNet's pruning) or redistributed (SNFS);
    # and the largest |final layer density - the start distribution's at the target density|
    # (0: kept; null for a global start or dense). The layers' final densities are in
    # layer_densities_json.
    "allocation": str,
    "allocation_shift": float,
    # Which weights may be zero: unstructured, or N:M (at most N nonzeros in every M
    # consecutive weights, input channel fastest); activation for a method that sparsifies
    # hidden units instead (its weights dense); null for dense.
    "pattern": str,
    # Share of MLP hidden units active over the test set, for an activation-sparsity method
    # (top-k activation); null for the others.
    "activation_density": float,
    # The initial-weight rule applied to the initial masks (default | swi | scaled, init.py).
    "init": str,
    # Distinct optimizer steps at which some mask changed during training (all methods,
    # measured by the mask store; one-shot pruning counts 1, static 0).
    "mask_updates": int,
    # Share of prunable weights active at the end AND active for at least the last 10 % of the
    # run's steps: the nominal density (1 - actual_sparsity) also counts connections grown at
    # the last update, which were barely trained (SET evolving until the last epochs).
    "trained_density": float,
    # Share of output units reachable from the input through active weights, after the
    # method's initial masks and at the end (connectivity.py); null where the test does
    # not apply (LayerNorm/attention models). Below 1: part of the network is disconnected.
    "reachable_outputs_init": float,
    "reachable_outputs": float,
    # Effective density (Vysogorets & Kempe 2023): share of prunable weights that are active
    # AND on some input-to-output path of active weights, at the start and at the end; null
    # where the test does not apply (as reach). Below 1 - actual_sparsity: dead weights.
    "effective_density_init": float,
    "effective_density": float,
    # Wall-clock seconds spent in the method's mask updates over the whole run (choosing what
    # to drop and grow and installing the new masks and initial values; FLOPs bookkeeping
    # excluded; MaskMethod.timed_update), and how many updates there were. Null for methods
    # that never change their masks during training (dense, static, the pruning methods).
    "regrowth_s": float,
    "regrowth_updates": int,
}


# Columns a failed/diverged record must leave null (it never got that far); set on ok records.
FAILED_NULL_COLUMNS: tuple[str, ...] = (
    "test_acc",
    "test_loss",
    "val_acc",
    "val_loss",
    "actual_sparsity",
    "steps",
    "train_flops",
    "inference_flops",
    "train_flops_rel_dense",
    "inference_flops_rel_dense",
    "params_nonzero",
    "train_wall_s",
    "infer_ms",
    "trained_density",
    "mask_updates",
    "effective_density",
    "regrowth_s",
    "regrowth_updates",
)


FINITE_COLUMNS: tuple[str, ...] = (
    "target_sparsity",
    "actual_sparsity",
    "test_acc",
    "test_loss",
    "val_acc",
    "val_loss",
    "train_flops",
    "inference_flops",
    "train_flops_rel_dense",
    "inference_flops_rel_dense",
    "train_wall_s",
    "infer_ms",
)


# What names a row in error messages (besides its cell id).
IDENT: tuple[str, ...] = ("task", "method", "setting_id", "target_sparsity", "seed")
