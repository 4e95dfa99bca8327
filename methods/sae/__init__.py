"""Sparse-autoencoder architectures (one file each; the contract in :mod:`.base`), the shared
training loop, metrics and synthetic ground truth. The registry discovers the architectures."""
