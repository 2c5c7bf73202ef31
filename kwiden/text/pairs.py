"""`kwiden.Tokenizer`: texts and pairs of texts to the token and segment ids a BERT reads, on the
tokenizer `kwiden.text.vocabulary.load_tokenizer` loads from a folder."""

import numpy as np

from kwiden.text.tokenizer import check_text
from kwiden.text.vocabulary import CorpusTokenizer, load_tokenizer

# BERT's positions: the default `maxlen` where the folder does not say.
BERT_MAXLEN = 512


class Tokenizer:
    """BERT's tokenizer for texts and pairs: WordPiece with CJK characters
    split one by one, as BERT (and the Chinese BERT and RoBERTa-wwm
    releases) tokenize, or a folder's `tokenizer.json`.

    `encode(first, second=None, maxlen=None)` gives `(token_ids, segment_ids)`
    for one text or a pair: `[CLS] first [SEP] second [SEP]`, segment 0 then 1,
    the longer text truncated first to fit `maxlen`. Calling the tokenizer on
    a list of texts (or of pairs) gives the two arrays padded with 0, ready for
    a kwiden BERT; an empty list gives two int32 arrays of shape (0, 0).

    The tokenizer is loaded as every kwiden entry point loads one
    (`load_tokenizer`): a folder's `tokenizer.json`, else its `vocab.txt`,
    lower-cased as its `tokenizer_config.json`'s `do_lower_case` says (True
    where it has none, as BERT's uncased releases). A vocabulary is checked
    (`read_vocabulary`): a missing file, an empty one, one without [UNK],
    [CLS] or [SEP], one that repeats a token (whose ids would skip, leaving
    `vocab_size` below the largest id) and one with a carriage return (\\r)
    other than in a \\r\\n line ending are refused with an error naming the
    file (and the lines at fault). A UTF-8 byte-order mark is skipped.

    Args:
        path: a model folder, its `vocab.txt` or its `tokenizer.json`; or a
            tokenizer `load_tokenizer` loaded.
        lowercase: lower-case and strip accents first (uncased models); False
            for cased models. By default the folder's `do_lower_case`, else
            True. A `tokenizer.json` says for itself.
        maxlen: the default `maxlen`: by default the folder's (its
            sentence-transformers `max_seq_length`, else its
            `tokenizer_config.json`'s `model_max_length`), else 512, BERT's
            positions.

    Example:

    >>> import tempfile, os
    >>> vocab = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(vocab, "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "我", "爱", "hello"]))
    >>> Tokenizer(vocab).encode("Hello 我爱", "我")
    ([2, 7, 5, 6, 3, 5, 3], [0, 0, 0, 0, 0, 1, 1])
    """

    def __init__(self, path, lowercase=None, maxlen=None):
        if isinstance(path, CorpusTokenizer):
            if lowercase is not None:
                raise ValueError("lowercase= is read when a tokenizer is loaded; give it to load_tokenizer.")
            loaded = path
        else:
            loaded = load_tokenizer(path, "The tokenizer", lowercase)
        if loaded.cls is None or loaded.separator is None:
            raise ValueError(f"The tokenizer {loaded.source} has no [CLS] or no [SEP], which BERT's texts begin and "
                             "end with: give a BERT's vocab.txt or tokenizer.json.")  # fmt: skip
        self.loaded = loaded
        self.source = loaded.source
        self.lowercase = loaded.lowercase
        self.maxlen = (loaded.maxlen or BERT_MAXLEN) if maxlen is None else maxlen
        from tokenizers import Tokenizer as Loaded
        from tokenizers import processors

        # Its own copy: truncation set here must not cut what another user of `loaded` reads.
        self._tokenizer = Loaded.from_str(loaded.tokenizer.to_str())
        if self._tokenizer.post_processor is None:  # a tokenizer.json saved without one: BERT's
            cls, separator = (self._tokenizer.id_to_token(i) for i in (loaded.cls, loaded.separator))
            self._tokenizer.post_processor = processors.BertProcessing((separator, loaded.separator), (cls, loaded.cls))

    @property
    def vocab_size(self):
        return self.loaded.vocab_size

    def get_vocab(self):
        """Each token's id, special tokens included (as transformers' `get_vocab`)."""
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def tokenize(self, text):
        """The word pieces of `text`, with [CLS] and [SEP], truncated to the default `maxlen`."""
        self._truncate(None)
        return self._tokenizer.encode(check_text(text, "The text")).tokens

    def encode(self, first, second=None, maxlen=None):
        self._truncate(maxlen)
        first = check_text(first, "The first text")
        second = None if second is None else check_text(second, "The second text")
        encoding = self._tokenizer.encode(first, second)
        return encoding.ids, encoding.type_ids

    def __call__(self, texts, maxlen=None):
        """Padded `[token_ids, segment_ids]` arrays for a list of texts or of
        `(first, second)` pairs."""
        return list(self.encode_batch(texts, maxlen)[:2])

    def encode_batch(self, texts, maxlen=None):
        """`(token_ids, segment_ids, cut)`: the padded arrays of a list of
        texts or of pairs, and how many of them were cut to `maxlen`."""
        if isinstance(texts, str):
            raise ValueError("Call the tokenizer on a list of texts (or of pairs); for one text use `encode`.")
        self._truncate(maxlen)
        texts = [_checked_item(item, index) for index, item in enumerate(texts)]
        encodings = self._tokenizer.encode_batch(texts)
        length = max((len(e.ids) for e in encodings), default=0)
        token_ids = np.zeros((len(encodings), length), "int32")
        segment_ids = np.zeros_like(token_ids)
        for row, e in enumerate(encodings):
            token_ids[row, : len(e.ids)] = e.ids
            segment_ids[row, : len(e.ids)] = e.type_ids
        return token_ids, segment_ids, sum(bool(e.overflowing) for e in encodings)

    def _truncate(self, maxlen):
        maxlen = self.maxlen if maxlen is None else maxlen
        if maxlen < 3:
            raise ValueError(f"`maxlen` must leave room for [CLS] and [SEP], at least 3; got maxlen={maxlen}.")
        self._tokenizer.enable_truncation(maxlen, strategy="longest_first")


def _checked_item(item, index):
    """A text, or a `(first, second)` pair, checked by `check_text`."""
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return tuple(check_text(text, f"Text {index}, {side}") for text, side in zip(item, ("first", "second")))
    return check_text(item, f"Text {index}")
