"""A small CoNLL-U treebank (three sentences, one with a word that sentencepiece splits)."""

from __future__ import annotations

CONLLU = ("1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tunbelievable\tx\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
          "3\thappened\tx\tVERB\tVBD\t_\t0\troot\t_\t_\n4\tyesterday\tx\tNOUN\tNN\t_\t3\tobl\t_\t_\n\n"
          "1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n"
          "1\tSing\tx\tVERB\tVB\t_\t0\troot\t_\t_\n2\tloudly\tx\tADV\tRB\t_\t1\tadvmod\t_\t_\n"
          "3\ttonight\tx\tNOUN\tNN\t_\t1\tobl\t_\t_\n\n")
