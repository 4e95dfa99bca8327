"""Model-merging methods: pure functions (θ0, experts, params, optional data) -> merged trunk,
one file each; the family contract is in :mod:`.base`. The registry discovers the modules."""
