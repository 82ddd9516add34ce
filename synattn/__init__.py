"""synattn: syntax-aware and structured attention for Transformers.

The package is laid out as one-way data flow (see ``docs/architecture.md``)::

    trees -> structs -> attention -> models -> data / train / generate / evaluate -> viz -> cli
"""

__version__ = "0.1.0"
