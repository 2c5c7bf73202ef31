"""Text: BERT's WordPiece and the checks every text passes (`tokenizer`), what a
folder says of its tokenizer (`folder`), the one loader every entry point uses
(`vocabulary`: bytes, WordPiece, a folder's own; vocabularies built on a corpus),
texts and pairs to BERT's ids (`pairs`: `kwiden.Tokenizer`), the corpus that ships
with kwiden (`corpus`) and a corpus tokenized once into a token file (`tokens`).
"""

from kwiden.exports import lazy as _lazy

__getattr__, __dir__ = _lazy(__name__, {})  # its modules, as attributes once asked for
