"""The columns of the sae pillar's runs table: plain data, so that the pillar and its
jobs import them without pandera and polars (only validation needs those)."""

from __future__ import annotations

# Columns of an SAE record besides the common ones; metrics on the source's held-out tokens.
COLUMNS: dict[str, type] = {
    "activations": str,  # the activation source's name in the spec (sae.sources)
    "activations_kind": str,  # "synthetic", "lm" or "image"
    "hookpoint": str,  # lm, image: where the activations are read ("" for synthetic)
    "d_in": int,  # activation dimension d
    "width": int,  # SAE latents m
    "mse": float,  # E‖x − x̂‖² in the scaled space (E‖x‖₂ = √d)
    "explained_variance": float,  # 1 − E‖x − x̂‖² / E‖x − E[x]‖²
    "fvu": float,  # 1 − explained_variance
    "l0": float,  # nonzero latents per token (negative ones count)
    "l0_train": float,  # inference L0 on the training tokens (BatchTopK's θ is set there)
    "dead_fraction": float,  # latents silent over the last dead_window training tokens
    "dense_fraction_1pct": float,  # latents firing on > 1 % of held-out tokens
    "dense_fraction_10pct": float,  # ... on > 10 %
    "shrinkage": float,  # γ = E‖x̂‖² / E⟨x̂, x⟩ (1: unbiased)
    "ce_clean": float,  # lm, image: held-out cross-entropy of the model (nats per token)
    "ce_zero": float,  # ... with the hookpoint zero-ablated
    "ce_sae": float,  # ... with x̂ spliced in at the hookpoint
    "kl_sae": float,  # mean KL(p_clean ‖ p_SAE) per token (nats)
    "loss_recovered": float,  # (ce_zero − ce_sae) / (ce_zero − ce_clean)
    "kl_recovered": float,  # (KL_zero − KL_SAE) / KL_zero
    "probe_acc_k1": float,  # sparse probing, balanced accuracy with the top-1 latent
    "probe_acc_k2": float,  # ... top-2
    "probe_acc_k5": float,  # ... top-5
    "mcc": float,  # synthetic: mean matched |cos| of the decoder with the true dictionary
    "recovery_rate": float,  # synthetic: true features with matched |cos| >= 0.9
    "bipolar_fraction": float,  # latents firing with both signs (signed SAEs)
    "pair_recovery": float,  # synthetic: true ± pairs one matched latent fires both signs on
    "pair_recovery_any": float,  # ... with a matched latent (|cos| >= 0.9), any signs
    "train_tokens": int,  # tokens seen in training
    "train_flops": float,  # dense accounting (methods/sae/training.py: train_flops)
    "train_s": float,  # wall-clock of training
    "input_scale": float,  # the scalar the activations were multiplied by
    "final_parts_json": str,  # the loss parts of the last training step
}
