"""The merging pillar: tasks, trunks and their structured groups, artefact ids and the DAG,
spec errors, and a job's clear errors on a missing expert or mismatched architectures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sparsebench.methods.merging.base import MergeInputs, group_masks
from sparsebench.suite import paths
from sparsebench.suite.job import build_artefact, run_batch
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.merging import artefacts as arts
from sparsebench.suite.pillars.merging.config import TrunkConfig
from sparsebench.suite.pillars.merging.models import build_trunk, forward_flops, groups
from sparsebench.suite.pillars.merging.tasks import TASKS, _transform, load_task
from sparsebench.suite.spec import SpecError, validate

PILLAR = get_pillar("merging")
VIT = TrunkConfig("vit", width=16, depth=2, heads=4, mlp_ratio=2, patch=7)
MLP = TrunkConfig("mlp", width=8, depth=2)


def _spec(**section):
    base = PILLAR.example()["merging"]
    return validate({"benchmark": "m", "merging": {**base, **section}}, source="m.yaml")


@pytest.mark.parametrize("cfg", [VIT, MLP], ids=["vit", "mlp"])
def test_groups_are_disjoint_and_cover_heads_and_neurons(cfg):
    trunk = build_trunk(cfg)
    state = trunk.state_dict()
    gs = groups(cfg)
    count = torch.zeros(sum(v.numel() for v in state.values()), dtype=torch.int64)
    for g in gs:
        m = group_masks(state, [g])
        flat = torch.cat([m[k].flatten() for k in state])
        count += flat.long()
    assert int(count.max()) == 1, "no entry belongs to two groups"
    if cfg.kind == "vit":
        heads = [g for g in gs if g.kind == "head"]
        neurons = [g for g in gs if g.kind == "neuron"]
        assert len(heads) == cfg.depth * cfg.heads
        assert len(neurons) == cfg.depth * cfg.width * cfg.mlp_ratio
        # a head owns dh rows of q, k, v (weights and biases) and dh columns of o
        dh = cfg.width // cfg.heads
        expected = 3 * (dh * cfg.width + dh) + cfg.width * dh
        assert int(sum(group_masks(state, [heads[0]])[k].sum() for k in state)) == expected
        ungrouped = group_masks(state, gs, value=False)
        assert bool(ungrouped["patch.weight"].all())
        assert bool(ungrouped["blocks.0.attn.o.bias"].all())
    else:
        assert len(gs) == cfg.depth * cfg.width


def test_head_group_zeroes_exactly_that_heads_output():
    """Zeroing head 1's parameters (its q/k/v rows and o columns) changes the attention output
    only through that head: with o restricted to head 1's columns the output is o's bias."""
    torch.manual_seed(0)
    trunk = build_trunk(VIT)
    attn = trunk.blocks[0].attn
    g = next(g for g in groups(VIT) if g.kind == "head" and g.index == 1)
    state = trunk.state_dict()
    keep_only = group_masks(state, [g])
    x = torch.randn(2, 5, VIT.width)
    with torch.no_grad():
        for name, p in attn.named_parameters():
            key = f"blocks.0.attn.{name}"
            if key != "blocks.0.attn.o.bias":
                p.mul_(keep_only[key])
        out = attn(x)
        attn.o.weight.zero_()
        assert torch.allclose(attn(x), attn.o.bias.expand_as(out))


def test_tasks_are_real_and_transformed_consistently():
    a, r = load_task("digits"), load_task("digits_mirror")
    xa, ya = a.test.tensors
    xr, yr = r.test.tensors
    assert xa.shape[1:] == (1, 28, 28) and torch.equal(ya, yr)
    assert torch.allclose(torch.flip(xa, dims=(-1,)), xr, atol=1e-5)
    assert set(TASKS["mnist_parity"].__dict__) and TASKS["mnist_parity"].num_classes == 2
    x = torch.arange(2 * 28 * 28, dtype=torch.float32).view(2, 1, 28, 28)
    p = _transform(x, "permute")
    assert torch.equal(p.flatten(1).sort(1).values, x.flatten(1)), "a permutation"
    assert torch.equal(_transform(x, "permute"), p), "the same fixed permutation every time"


def test_forward_flops_of_the_mlp_by_hand():
    assert forward_flops(MLP) == 2 * (784 * 8 + 8 * 8)


def test_artefact_ids_hash_what_defines_them_and_form_a_dag():
    spec = _spec()
    sec = spec.data["merging"]
    ids = [a.id for a in PILLAR.artefacts(spec)]
    assert len(ids) == len(set(ids))
    base = arts.base_id(sec, "mlp", 0)
    assert ids[0] == base and base.endswith("/seed0/base")
    other = _spec(finetune={"epochs": 2, "lr": 0.001, "batch_size": 128})
    osec = other.data["merging"]
    assert arts.base_id(osec, "mlp", 0) == base, "fine-tuning does not change θ0"
    assert arts.expert_id(osec, "mlp", 0, "digits") != arts.expert_id(sec, "mlp", 0, "digits")
    full = _spec(head_shots=None).data["merging"]  # a head fit on other examples: another expert
    assert arts.base_id(full, "mlp", 0) == base
    assert arts.expert_id(full, "mlp", 0, "digits") != arts.expert_id(sec, "mlp", 0, "digits")
    known: set[str] = set()
    for a in PILLAR.artefacts(spec):  # inputs come before the artefacts that read them
        assert set(a.inputs) <= known, a.id
        known |= set(a.outputs)
    cells = PILLAR.cells(spec)
    assert {i for c in cells for i in c.inputs} <= known


def test_cells_are_references_and_method_settings():
    spec = _spec(methods={"ties": {"k": [0.1, 0.2]}, "cass_tuning": {}})
    cells = PILLAR.cells(spec)
    kinds = {(c.method, c.columns["kind"]) for c in cells}
    assert ("zero_shot", "reference") in kinds and ("ties", "merge") in kinds
    assert sum(c.method == "ties" for c in cells) == 2
    assert len({c.id for c in cells}) == len(cells)
    assert {c.batch for c in cells} == {"mlp/seed0"}


def test_a_methods_own_artefacts_come_from_its_declaration_and_are_shared_by_settings():
    """CASS-Tuning's masked fine-tunes: one per (keep, n_examples, overlap) and task, each from
    θ0 and the seed's experts; settings that differ only in the host share them; a cell reads (and
    reruns on) exactly its own."""
    spec = _spec(methods={"ties": {}, "cass_tuning": {"host": ["task_arithmetic", "ties"],
                                                       "keep": [0.5, 0.25]}})  # fmt: skip
    sec = spec.data["merging"]
    own = [a for a in PILLAR.artefacts(spec) if a.params["kind"] == "method"]
    assert len(own) == 2 * 2  # two keeps × two tasks (not × two hosts)
    base = arts.files(arts.base_id(sec, "mlp", 0))[0]
    for a in own:
        task = a.params["task"]
        assert a.id.endswith(f"/{task}") and "/seed0/m-cass_tuning-masked_expert-" in a.id
        assert a.params["request_params"] == {"keep": a.params["request_params"]["keep"],
                                              "n_examples": 256, "overlap": 0.5,
                                              "tasks": sec["tasks"]}  # fmt: skip
        experts = [arts.files(arts.expert_id(sec, "mlp", 0, t))[0] for t in sec["tasks"]]
        assert a.inputs == (base, *experts)  # its peers' heads too (the overlap penalty)
    by_keep = {
        k: {a.outputs[0] for a in own if a.params["request_params"]["keep"] == k}
        for k in (0.5, 0.25)
    }
    assert len(by_keep[0.5]) == len(by_keep[0.25]) == 2
    assert len({a.batch for a in own}) == 2, "batched like the experts, one job per keep"
    cells = PILLAR.cells(spec)
    tuning = [c for c in cells if c.method == "cass_tuning"]
    assert len(tuning) == 4
    for c in tuning:
        mine = by_keep[json.loads(c.params_json)["keep"]]
        other = set().union(*by_keep.values()) - mine
        assert mine <= set(c.inputs) and mine <= set(c.trigger["inputs"])
        assert not other & set(c.inputs)
    ties = next(c for c in cells if c.method == "ties")
    assert not any("/m-" in i for i in ties.inputs)
    # a new request value names a new artefact; the fine-tuning recipe too (its input)
    more = _spec(methods={"cass_tuning": {"n_examples": 64}})
    assert not {a.id for a in PILLAR.artefacts(more)} & {a.id for a in own}
    slower = _spec(methods={"cass_tuning": {"keep": 0.5}},
                   finetune={"epochs": 2, "lr": 0.001, "batch_size": 128})  # fmt: skip
    assert not {a.id for a in PILLAR.artefacts(slower)} & {a.id for a in own}


def test_setting_and_cell_ids_of_methods_with_artefacts_are_pinned():
    """Ids from before CASS-Tuning's artefacts were declared by the method: unchanged."""
    spec = _spec(methods={"cass_tuning": {"host": ["task_arithmetic", "ties"], "lam": 0.3}})
    ids = sorted(c.id for c in PILLAR.cells(spec) if c.method == "cass_tuning")
    assert ids == ["mlp/cass_tuning/p580d08308d/seed0", "mlp/cass_tuning/pe74f2dfa8e/seed0"]


@pytest.mark.parametrize(
    "section, expected",
    [
        ({"tasks": ["digits", "svhn"]}, ["merging.tasks", "svhn", "mnist_rot90"]),
        ({"tasks": ["digits"]}, ["merging.tasks"]),
        ({"methods": {"tie": {}}}, ["merging.methods", "tie", "ties"]),
        ({"methods": {"ties": {"k": "big"}}}, ["merging.methods.ties", "'k'", "big"]),
        ({"methods": {"dare_ta": {"p": 1.0}}}, ["merging.methods.dare_ta", "p"]),
        ({"models": {"v": {"kind": "vit", "width": 30, "depth": 1}}}, ["merging.models.v", "30"]),
        ({"seeds": []}, ["merging.seeds"]),
        ({"finetune": {"epochs": 1}}, ["merging.finetune", "lr"]),
    ],
)
def test_spec_errors_name_the_key_and_what_is_allowed(section, expected):
    with pytest.raises(SpecError) as e:
        _spec(**section)
    for part in expected:
        assert part in str(e.value), (part, str(e.value))


def test_benchmark_may_not_be_called_artefacts():
    with pytest.raises(SpecError, match="artefacts"):
        validate({"benchmark": "artefacts", **PILLAR.example()}, source="a.yaml")


def test_missing_expert_gives_a_failed_record_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    spec = _spec(methods={"task_arithmetic": {"lam": 0.3}}, references=[])
    [record] = run_batch(spec, PILLAR, PILLAR.cells(spec), root=tmp_path, progress=lambda m: None)
    assert record["status"] == "failed"
    assert "missing merging artefact" in record["error"] and "base" in record["error"]
    assert "sparsebench run" in record["error"]


def test_mismatched_architectures_are_refused_by_name():
    base = {"w": torch.zeros(3, 2), "b": torch.zeros(3)}
    with pytest.raises(ValueError, match=r"w has shape \(2, 2\), the base \(3, 2\)"):
        MergeInputs(base, [{"w": torch.zeros(2, 2), "b": torch.zeros(3)}])
    with pytest.raises(ValueError, match="other parameters"):
        MergeInputs(base, [{"w": torch.zeros(3, 2)}])


def test_failed_build_leaves_no_artefact(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    spec = _spec()
    expert = next(a for a in PILLAR.artefacts(spec) if a.params["kind"] == "expert")
    with pytest.raises(FileNotFoundError, match="missing merging artefact"):
        build_artefact(spec, PILLAR, expert)  # its θ0 is not built
    assert not any((tmp_path / "artefacts").rglob("*.safetensors"))


def test_checkpoints_load_without_unpickling(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    tensors = {"w": torch.arange(6.0).view(2, 3)}
    arts.save("x/seed0/base", tensors, {"kind": "base"})
    model, meta = arts.files("x/seed0/base")
    assert open(model, "rb").read(8) != b"\x80\x04\x95"  # not a pickle
    loaded, m = arts.load("x/seed0/base")
    assert torch.equal(loaded["w"], tensors["w"]) and m["kind"] == "base"
    assert json.loads(open(meta).read())["kind"] == "base"


def test_cass_tuning_expert_is_exactly_theta0_outside_its_mask():
    """Masked gradients alone are not enough under AdamW's weight decay: the entries outside
    the mask must come back exactly to θ0."""
    from torch.utils.data import TensorDataset

    from sparsebench.suite.pillars.merging.config import Recipe
    from sparsebench.suite.pillars.merging.train import train

    torch.manual_seed(0)
    trunk = build_trunk(MLP)
    base = {k: v.clone() for k, v in trunk.state_dict().items()}
    gs = groups(MLP)
    masks = group_masks(base, gs[:3])  # three neurons of the first layer
    data = TensorDataset(torch.randn(64, 1, 28, 28), torch.randint(0, 3, (64,)))
    head = (torch.randn(3, MLP.width), torch.zeros(3))
    recipe = Recipe(epochs=2, lr=1e-2, batch_size=16, weight_decay=0.1)
    out = train(MLP, base, [head], [data], recipe, seed=0, grad_masks=masks).trunk.state_dict()
    for k in base:
        tau = out[k] - base[k]
        assert torch.count_nonzero(tau[~masks[k]]) == 0, k
    assert any(torch.count_nonzero(out[k] - base[k]) for k in base), "the mask did train"


def test_grid_edge_flags_the_ends_of_numeric_grids():
    from sparsebench.suite.pillars.merging.job import at_edge

    grid = {"lam": (0.1, 0.2, 0.3), "p": (0.5,), "host": ("ties",)}
    assert at_edge(grid, {"lam": 0.1, "p": 0.5}) == ["lam"]
    assert at_edge(grid, {"lam": 0.2}) == []
    assert at_edge(grid, {"lam": 0.3}) == ["lam"]


def test_run_refuses_cells_whose_artefacts_are_missing(tmp_path, monkeypatch):
    """No failed records that would block Snakemake's artefact rules: a clear refusal."""
    import yaml

    from sparsebench.suite.cli import main

    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    spec_file = tmp_path / "m.yaml"
    spec_file.write_text(yaml.safe_dump({"benchmark": "m", **PILLAR.example()}))
    with pytest.raises(SystemExit, match="do not exist yet.*sparsebench run"):
        main(["cells", "merging", "--all", "--spec", str(spec_file), "--root", str(tmp_path)])
    assert not list(tmp_path.rglob("record.json"))


def test_a_methods_check_is_run_on_every_setting_and_named_in_the_error():
    """Consensus' k may not exceed the number of tasks: the method's check, the pillar's
    file and key path."""
    with pytest.raises(SpecError) as e:
        _spec(methods={"consensus": {"k": [2, 3]}})
    assert str(e.value) == (
        "m.yaml: merging.methods.consensus: k: 3 tasks must agree but the spec merges 2; "
        "allowed: 1 to 2"
    )
    _spec(methods={"consensus": {"k": 2}})


def test_rows_of_other_expert_sets_are_labelled_apart():
    import polars as pl

    from sparsebench.suite.pillars.merging.board import label_expert_sets

    runs = pl.DataFrame({"model": ["mlp", "mlp", "vit", "vit"], "experts": ["a", "b", "c", None]})
    out = label_expert_sets(runs)["model"].to_list()
    assert out == ["mlp [a]", "mlp [b]", "vit", "vit"]


def test_trunk_hash_is_sha256_of_names_dtypes_shapes_and_bytes():
    import hashlib
    import struct

    one = {"w": torch.tensor([1.0, -2.0])}
    # by hand: the name, dtype and shape, then the little-endian float32 bytes of 1.0 and -2.0
    want = hashlib.sha256(b"w|torch.float32|(2,)|" + struct.pack("<2f", 1.0, -2.0)).hexdigest()
    assert arts.trunk_hash(one) == want
    assert arts.trunk_hash({"w": one["w"].clone()}) == want  # content, not identity
    nudged = torch.tensor([1.0, torch.nextafter(torch.tensor(-2.0), torch.tensor(0.0)).item()])
    assert arts.trunk_hash({"w": nudged}) != want  # one ulp in one entry
    assert arts.trunk_hash({"v": one["w"]}) != want  # another name
    assert arts.trunk_hash({"w": one["w"].view(1, 2)}) != want  # another shape


def _save_batch(spec, other_base_for: str | None = None):
    """θ0 and the experts of ``spec``'s one (mlp, seed 0) batch, saved by hand; the expert of
    task ``other_base_for`` records the hash of a different θ0 of the same shapes."""
    sec = spec.data["merging"]
    cfg = arts.config(sec, "mlp")
    torch.manual_seed(0)
    base = {k: torch.randn_like(v) for k, v in build_trunk(cfg).state_dict().items()}
    other = {k: v + 1.0 for k, v in base.items()}
    arts.save(arts.base_id(sec, "mlp", 0), base, {"kind": "base"})
    for t in sec["tasks"]:
        n = load_task(t, "data").num_classes
        head = {"head.weight": torch.zeros(n, cfg.width), "head.bias": torch.zeros(n)}
        made_from = other if t == other_base_for else base
        meta = {"kind": "expert", "base_sha256": arts.trunk_hash(made_from)}
        expert = {k: v + 0.01 * torch.randn_like(v) for k, v in base.items()}
        arts.save(arts.expert_id(sec, "mlp", 0, t), {**expert, **head}, meta)


def test_an_expert_made_from_another_theta0_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    spec = _spec(methods={"task_arithmetic": {"lam": 0.3}}, references=[])
    _save_batch(spec, other_base_for="digits_mirror")
    [record] = run_batch(spec, PILLAR, PILLAR.cells(spec), root=tmp_path, progress=lambda m: None)
    assert record["status"] == "failed"
    err = record["error"]
    assert "digits_mirror" in err and "meta.json" in err and "base_sha256" in err
    assert "another θ0" in err and "delete its folder" in err


@pytest.mark.parametrize("fault", ["nan", "shape", "dtype", "truncated"])
def test_a_corrupted_expert_fails_the_cell_naming_its_file(tmp_path, monkeypatch, fault):
    """An all-NaN expert (written so, hash and all), one of θ0's tensors in another shape or
    dtype (an expert from another trunk, hashes consistent), a truncated file: each a failed
    record naming the expert's file and how to rebuild it, never an ok merge."""
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    spec = _spec(methods={"task_arithmetic": {"lam": 0.3}}, references=[])
    _save_batch(spec)
    sec = spec.data["merging"]
    eid = arts.expert_id(sec, "mlp", 0, "digits")
    tensors, meta = arts.load(eid)
    name = next(k for k in tensors if tensors[k].ndim == 2 and not k.startswith("head."))
    if fault == "nan":
        tensors[name] = torch.full_like(tensors[name], float("nan"))
    elif fault == "shape":
        tensors[name] = tensors[name].reshape(-1)
    elif fault == "dtype":
        tensors[name] = tensors[name].double()
    keep = {k: v for k, v in meta.items() if k not in ("sha256", "tensors", "written_at")}
    arts.save(eid, tensors, keep)
    model_file = arts.files(eid)[0]
    if fault == "truncated":
        Path(model_file).write_bytes(Path(model_file).read_bytes()[:100])
    [record] = run_batch(spec, PILLAR, PILLAR.cells(spec), root=tmp_path, progress=lambda m: None)
    assert record["status"] == "failed"
    assert model_file in record["error"] and "rebuild" in record["error"], record["error"]


def test_experts_made_from_the_batchs_theta0_merge(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    spec = _spec(methods={"task_arithmetic": {"lam": 0.3}}, references=[])
    _save_batch(spec)
    [record] = run_batch(spec, PILLAR, PILLAR.cells(spec), root=tmp_path, progress=lambda m: None)
    assert record["status"] == "ok", record.get("error")
    # two dense task vectors: mixed signs by chance on half the coordinates; τ = 0.01·N(0, 1)
    # against θ0 ~ N(0, 1) of the same shapes: ||τ|| / ||θ0|| ≈ 0.01
    assert record["sign_conflict_chance"] == pytest.approx(0.5)
    assert record["tau_rel_norm"] == pytest.approx(0.01, rel=0.05)
    assert abs(record["tau_cosine"]) < 0.05 and record["others_lambda"] == 0.3
    assert set(json.loads(record["diagnostics_json"])) == {"digits", "digits_mirror"}


def _row(method, norm, seed=0, kind="merge", per_task_models=False, **extra):
    per = {"a": {"acc": norm, "loss": 0.1, "expert_acc": 1.0, "normalized": norm}}
    return {
        "model": "mlp", "method": method, "setting": "", "kind": kind, "status": "ok",
        "seed": seed, "tasks": "a,b", "norm_acc": norm, "avg_acc": norm, "min_norm_acc": norm,
        "density": 1.0, "sign_conflict": 0.6, "sign_conflict_chance": 0.5, "merge_s": 0.0,
        "examples": 0, "chosen_json": "{}", "at_grid_edge": "",
        "per_task_models": per_task_models, "per_task_json": json.dumps(per),
        "tau_rel_norm": 0.05, "tau_cosine": 0.02, "own_gain": 0.2, "others_cost": -0.03,
        "others_lambda": 0.3, **extra,
    }  # fmt: skip


def test_per_task_trunks_are_ranked_apart_and_the_setting_is_shown():
    import polars as pl

    from sparsebench.suite.pillars.merging.board import leaderboard, markdown

    runs = pl.DataFrame(
        [
            _row("task_arithmetic", 0.80),
            _row("ties", 0.82),
            _row("tall_masks", 0.99, per_task_models=True),
            _row("zero_shot", 0.70, kind="reference"),
            _row("ties", 0.84, seed=1, tau_rel_norm=0.07, own_gain=0.24),
        ]
    )
    board = leaderboard(runs)
    ranks = dict(zip(board["method"], board["rank"]))
    # TIES (0.83 mean, 2 seeds) first among single models; TA (one seed) cannot be told from
    # it and shares its rank; TALL first of its own group; references unranked
    assert ranks == {"ties": 1, "task_arithmetic": 1, "tall_masks": 1, "zero_shot": None}
    text = markdown(board, runs)
    # the setting line: seeds 0 and 1 give ‖τ‖/‖θ0‖ 0.05 and 0.07 (mean 0.060, std 0.014),
    # own gain 20 and 24 points (22.0 ± 2.8)
    assert "Setting (2 seeds, validation): ‖τ_t‖/‖θ0‖ 0.060 ± 0.014;" in text
    assert "own vector adds 22.0 ± 2.8 points" in text
    assert "at λ = 0.3 change the expert by -3.0 ± 0.0 points" in text
    assert "| sign conflict (%) | chance (%) |" in text
