"""A merging method defined only in the tests (tests/merging_with_artefact.py), with an
artefact of its own, runs end to end through the Snakefile: the pillar builds its artefact
per task, the cell reads it, the record is what the method's formula predicts; nothing outside
that one file names the method."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from sparsebench.suite.pillars.merging.tasks import load_task

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]
NAME = "shrunk_mean"
SPEC = """
benchmark: plug
merging:
  models: {mlp: {kind: mlp, width: 32, depth: 1}}
  tasks: [digits, digits_mirror]
  methods: {shrunk_mean: {scale: 0.25}}
  references: []
  seeds: [0]
  pretrain: {epochs: 1, lr: 0.001, batch_size: 128}
  finetune: {epochs: 1, lr: 0.001, batch_size: 128}
"""


def test_a_merging_method_with_its_own_artefact_is_one_file(tmp_path):
    (tmp_path / "plug.yaml").write_text(SPEC)
    env = {k: v for k, v in os.environ.items() if k != "SPARSEBENCH_ARTEFACTS"}
    env.update(
        PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        SPARSEBENCH_PLUGINS="tests.merging_with_artefact",
    )
    # the setting id by open_lth's rule: a hash of the non-default values
    setting = "p" + hashlib.sha1(json.dumps({"scale": 0.25}).encode()).hexdigest()[:10]
    record = Path("results/plug/merging/runs/mlp", NAME, setting, "seed0/record.json")
    # the record alone as the target: its artefacts and cell run, not the board's jobs
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
           "--config", f"spec={tmp_path / 'plug.yaml'}", "--cores", "1", str(record)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    rec = json.loads((tmp_path / record).read_text())
    assert rec["status"] == "ok" and rec["method"] == NAME, rec.get("error")
    assert rec["setting_id"] == setting and json.loads(rec["params_json"]) == {"scale": 0.25}

    root = tmp_path / "results" / "artefacts" / "merging"
    [seed] = root.glob("mlp-*/seed0")
    [base_file] = seed.glob("base/model.safetensors")
    base = load_file(base_file)
    experts, shrunk_sums = [], []
    for task in ("digits", "digits_mirror"):
        [expert_file] = seed.glob(f"expert-*/{task}/model.safetensors")
        expert = {k: v for k, v in load_file(expert_file).items() if not k.startswith("head.")}
        experts.append(expert)
        # the method's artefact: its own folder under the seed's, one per task
        [own_file] = seed.glob(f"m-{NAME}-shrunk-*/{task}/model.safetensors")
        own = load_file(own_file)
        assert set(own) == set(base)
        for k in base:  # θ0 + s·(θ_t − θ0), s = 0.25
            expected = base[k] + 0.25 * (expert[k] - base[k])
            assert own[k].allclose(expected, rtol=0, atol=1e-6), k
        meta = json.loads((own_file.parent / "meta.json").read_text())
        assert meta["method"] == NAME and meta["scale"] == 0.25 and meta["task"] == task
        for other in ("digits", "digits_mirror"):  # ctx.peer: that task's head and train split
            [other_file] = seed.glob(f"expert-*/{other}/model.safetensors")
            head_sum = float(load_file(other_file)["head.weight"].double().sum())
            train_n = load_task(other, REPO / "data").train.tensors[0].shape[0]
            assert meta[f"peer_{other}"] == [pytest.approx(head_sum, rel=1e-9), train_n, train_n]
        shrunk_sums.append(sum(float(own[k].double().sum()) for k in own))
    info = json.loads(rec["info_json"])
    # what the merge read is the files' content, and its result the formula's:
    # θ = θ0 + s·mean_t τ_t, summed over every entry
    assert info["artefact_sums"] == pytest.approx(shrunk_sums, rel=1e-9)
    merged = sum(
        float((b + 0.25 * sum(e[k].double() - b for e in experts) / 2).sum())
        for k, b in ((k, v.double()) for k, v in base.items())
    )
    assert info["merged_sum"] == pytest.approx(merged, rel=1e-6)

    # nothing but the plug-in file names the method: no pillar or method file was edited
    for folder in ("suite", "methods"):
        for f in (REPO / folder).rglob("*"):
            if f.is_file() and f.suffix in (".py", ".json", ".yaml", ".smk"):
                assert NAME not in f.read_text(encoding="utf-8"), f
