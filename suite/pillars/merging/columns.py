"""The columns of the merging pillar's runs table: plain data, so that the pillar and its
jobs import them without pandera and polars (only validation needs those)."""

from __future__ import annotations

# Columns of a merging record besides the common ones (accuracies are fractions in [0, 1]).
COLUMNS: dict[str, type] = {
    "model": str,  # the trunk's name in the spec (merging.models)
    "experts": str,  # the expert set merged: trunk hash, fine-tuning hash, task-list hash
    "kind": str,  # "merge" | "reference"
    "tasks": str,  # the merged tasks, comma-separated, in order
    "n_tasks": int,
    "head_shots": int,  # labelled examples per class each task head was fit on (null: all)
    "avg_acc": float,  # mean over tasks of the test accuracy
    "norm_acc": float,  # mean over tasks of (merged test acc ÷ expert test acc)
    "min_norm_acc": float,  # the worst task's normalized test accuracy
    "avg_loss": float,  # mean over tasks of the test cross-entropy (nats)
    "val_norm_acc": float,  # normalized validation accuracy at the chosen hyperparameters
    "per_task_json": str,  # {task: {acc, loss, expert_acc, normalized}} on test
    "density": float,  # nonzero fraction of the task vectors the method combined
    "sign_conflict": float,  # among coordinates with >= 2 nonzero entries, mixed signs
    "sign_conflict_chance": float,  # what independent fair signs give on the same pattern
    # the batch's setting (diagnostics.py; the same in every record of a trunk and seed)
    "tau_rel_norm": float,  # mean over tasks of ||tau_t|| / ||theta0||
    "tau_cosine": float,  # mean cosine between distinct tasks' vectors
    "own_gain": float,  # mean over tasks of acc(theta_t) - acc(theta0), validation
    "others_cost": float,  # mean of acc(theta_t + 0.3 sum_{s!=t} tau_s) - acc(theta_t)
    "others_lambda": float,  # the lambda of others_cost
    "diagnostics_json": str,  # per task: tau_rel_norm, own_gain, others_cost
    "merge_s": float,  # wall-clock of the chosen merge (no evaluation)
    "select_s": float,  # wall-clock of the whole validation search (merges + evaluations)
    "n_candidates": int,  # grid points evaluated on validation
    "examples": int,  # data examples the chosen merge read (0: data-free)
    "chosen_json": str,  # the hyperparameters chosen on validation
    "at_grid_edge": str,  # searched parameters chosen at the end of their grid ("" if none)
    "per_task_models": bool,  # one trunk per task (TALL masks, individual), not one model
    "curve_json": str,  # [{param: value, val_avg_acc, val_norm_acc}] over the grid
    "info_json": str,  # method-specific numbers (e.g. AdaMerging's learned λ)
    "peak_mem_mb": float,  # peak resident memory of the cell (MiB)
}
