"""Post-training pruning of a language model (the lm_pruning pillar): magnitude, Wanda and
SparseGPT, one layer at a time on calibration text (see base.py)."""
