"""The built-in pillars, one folder each (see docs/architecture.md).

:data:`BUILTIN` is their list (name -> ``"module:attribute"`` of the Pillar class, imported
lazily), read by the pillar registry (``suite/pillar.py``), which names no pillar itself; the
order is the order of ``sparsebench pillars`` and of the summary.
"""

BUILTIN: dict[str, str] = {
    "classification": "sparsebench.suite.pillars.classification:ClassificationPillar",
    "hessian": "sparsebench.suite.pillars.hessian:HessianPillar",
    "kernels": "sparsebench.suite.pillars.kernels:KernelsPillar",
    "merging": "sparsebench.suite.pillars.merging:MergingPillar",
    "sae": "sparsebench.suite.pillars.sae:SAEPillar",
    "lm_pruning": "sparsebench.suite.pillars.lm_pruning:LMPruningPillar",
}
