"""The columns of the lm_pruning pillar's runs table: plain data, so that the pillar and its
jobs import them without pandera and polars (only validation needs those)."""

from __future__ import annotations

COLUMNS: dict[str, type] = {
    "model": str,  # the language model's artefact id (its config's hash)
    "setting": str,  # the method's parameters, readable
    "pattern": str,  # "dense", "unstructured" or "N:M"
    "target_sparsity": float,  # asked for (N:M: 1 - N/M; dense: 0)
    "actual_sparsity": float,  # zeros of the pruned layers' weights after pruning
    "calib_sequences": int,  # calibration windows (0: a method that reads none)
    "calib_tokens": int,
    "eval_tokens": int,  # held-out bytes the loss is averaged over
    "test_loss": float,  # nats per byte on the held-out windows
    "perplexity": float,  # exp(test_loss): per byte
    "dense_perplexity": float,  # the same model unpruned, same windows
    "ppl_ratio": float,  # perplexity / dense_perplexity
    "flops_rel_dense": float,  # inference FLOPs of the linear layers, sparse / dense
    "prune_s": float,  # calibration statistics + pruning, wall-clock
}
