"""Symbolic trees (numpy only): dependency trees and their relations, subword projection,
constituency trees, treebank I/O and tree metrics.

Heads follow CoNLL-U: ``heads[i - 1]`` is the 1-based head of word i, 0 = ROOT; several root words
may hang from the artificial ROOT.
"""

from synattn.trees.branching import left_branching, random_binary, right_branching, tree_from_spans
from synattn.trees.conllu_io import ReadReport, read_conllu, read_conllu_with_report, write_conllu
from synattn.trees.constituency import Tree, leaves, parse_brackets, read_brackets, spans, to_brackets
from synattn.trees.dependency import DependencyTree, is_projective_heads, validate_heads
from synattn.trees.metrics import AttachmentScores, BracketScores, attachment_scores, bracket_f1
from synattn.trees.relations import (
    batch_distance_labels,
    batch_relation_labels,
    batch_syntax_hints,
    batch_traversal_labels,
    batch_tree_distance,
    distance_labels,
    distance_vocab,
    head_targets,
    syntax_hints,
    traversal_labels,
    traversal_paths,
    traversal_vocab,
    tree_distance,
)
from synattn.trees.subword import first_piece_index, project_to_subwords, word_index_of_pieces

__all__ = [
    "AttachmentScores", "BracketScores", "DependencyTree", "ReadReport", "Tree", "attachment_scores",
    "batch_distance_labels", "batch_relation_labels", "batch_syntax_hints", "batch_traversal_labels",
    "batch_tree_distance", "bracket_f1", "distance_labels", "distance_vocab", "first_piece_index",
    "head_targets", "is_projective_heads", "leaves", "left_branching", "parse_brackets",
    "project_to_subwords", "random_binary", "read_brackets", "read_conllu", "read_conllu_with_report",
    "right_branching", "spans", "syntax_hints", "to_brackets", "traversal_labels", "traversal_paths",
    "traversal_vocab", "tree_distance", "tree_from_spans", "validate_heads", "word_index_of_pieces",
    "write_conllu",
]
