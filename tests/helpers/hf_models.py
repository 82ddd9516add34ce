"""Tiny random ``transformers`` models for the synattn.hf tests (hidden 32, 2 layers, 4 heads)."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

VOCAB = 60

# three small gold trees for the tests that train or score a supervised head
CONLLU = """\
1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\t_\t_\t3\tnsubj\t_\t_
3\tsat\tsit\tVERB\t_\t_\t0\troot\t_\t_
4\ton\ton\tADP\t_\t_\t6\tcase\t_\t_
5\tthe\tthe\tDET\t_\t_\t6\tdet\t_\t_
6\tmat\tmat\tNOUN\t_\t_\t3\tobl\t_\t_

1\tshe\tshe\tPRON\t_\t_\t2\tnsubj\t_\t_
2\treads\tread\tVERB\t_\t_\t0\troot\t_\t_
3\told\told\tADJ\t_\t_\t4\tamod\t_\t_
4\tbooks\tbook\tNOUN\t_\t_\t2\tobj\t_\t_

1\tdogs\tdog\tNOUN\t_\t_\t2\tnsubj\t_\t_
2\tbark\tbark\tVERB\t_\t_\t0\troot\t_\t_
3\tloudly\tloudly\tADV\t_\t_\t2\tadvmod\t_\t_

"""


def bert(task: str = "token", **kw):
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, **kw)
    if task == "token":
        return transformers.BertForTokenClassification(config)
    return transformers.BertModel(config)


def roberta():
    config = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=64)
    return transformers.RobertaForMaskedLM(config)


def gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=1, eos_token_id=2)
    return transformers.GPT2LMHeadModel(config)


def bart():
    config = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64)
    return transformers.BartForConditionalGeneration(config)


def t5():
    config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                   num_heads=4)
    return transformers.T5ForConditionalGeneration(config)


MODELS = {"bert": bert, "roberta": roberta, "gpt2": gpt2, "bart": bart, "t5": t5}
INPUT_SIDE = {"bert": "encoder", "roberta": "encoder", "gpt2": "decoder", "bart": "encoder",
              "t5": "encoder"}


SENTENCES = ["the cat sat on the mat", "a dog barked loudly at the mailman",
             "she reads old books", "colourless green ideas sleep furiously"]


def wordpiece_tokenizer(vocab_size: int = 60):
    """A BERT-style fast tokenizer ([CLS] ... [SEP]) trained on a few sentences: most words
    split into several pieces."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(SENTENCES, trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                                  special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    from tokenizers import decoders
    tok.decoder = decoders.WordPiece()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]")


def byte_bpe_tokenizer(vocab_size: int = 300):
    """A GPT-2-style byte-level BPE fast tokenizer (no special tokens added to a sentence)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES, trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        add_prefix_space=True)


def pretrained_folder(path, layers: int = 2):
    """A tiny random BERT saved as a pretrained model is: ``config.json``, ``model.safetensors`` and
    a fast WordPiece ``tokenizer.json`` (a stand-in for all-MiniLM-L6-v2 in the tests)."""
    tokenizer = wordpiece_tokenizer()
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=layers,
                                     num_attention_heads=4, intermediate_size=64, pad_token_id=tokenizer.pad_token_id,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    transformers.BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def real_minilm():
    """all-MiniLM-L6-v2's folder when its package is installed (scripts/setup.sh), else a skip."""
    from synattn.errors import MissingDependencyError
    from synattn.hf.pretrained import model_folder

    try:
        return model_folder("all-MiniLM-L6-v2")
    except MissingDependencyError as err:
        pytest.skip(f"the real pretrained model is not installed ({err})")
