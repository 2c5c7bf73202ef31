"""BERT's WordPiece tokenizer, on Hugging Face's `tokenizers` library."""

import numpy as np


class Tokenizer:
    """WordPiece with CJK characters split one by one, as BERT (and the Chinese
    BERT and RoBERTa-wwm releases) tokenize.

    `encode(first, second=None, maxlen=None)` gives `(token_ids, segment_ids)`
    for one text or a pair: `[CLS] first [SEP] second [SEP]`, segment 0 then 1,
    the longer text truncated first to fit `maxlen`. Calling the tokenizer on
    a list of texts (or of pairs) gives the two arrays padded with 0, ready for
    a kwiden BERT.

    Args:
        vocab_path: the model's `vocab.txt`.
        lowercase: lower-case and strip accents first (uncased models); False
            for cased models. Chinese models are usually uncased.
        maxlen: the default `maxlen` (512, BERT's positions).

    Example:

    >>> import tempfile, os
    >>> vocab = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(vocab, "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "我", "爱", "hello"]))
    >>> Tokenizer(vocab).encode("Hello 我爱", "我")
    ([2, 7, 5, 6, 3, 5, 3], [0, 0, 0, 0, 0, 1, 1])
    """

    def __init__(self, vocab_path, lowercase=True, maxlen=512):
        from tokenizers import BertWordPieceTokenizer

        self.vocab_path = str(vocab_path)
        self.lowercase = lowercase
        self.maxlen = maxlen
        self._tokenizer = BertWordPieceTokenizer(
            self.vocab_path, lowercase=lowercase, strip_accents=lowercase, handle_chinese_chars=True
        )

    @property
    def vocab_size(self):
        return self._tokenizer.get_vocab_size()

    def tokenize(self, text):
        """The word pieces of `text`, with [CLS] and [SEP], truncated to the default `maxlen`."""
        self._truncate(None)
        return self._tokenizer.encode(text).tokens

    def encode(self, first, second=None, maxlen=None):
        self._truncate(maxlen)
        encoding = self._tokenizer.encode(first, second)
        return encoding.ids, encoding.type_ids

    def __call__(self, texts, maxlen=None):
        """Padded `[token_ids, segment_ids]` arrays for a list of texts or of
        `(first, second)` pairs."""
        if isinstance(texts, str):
            raise ValueError("Call the tokenizer on a list of texts (or of pairs); for one text use `encode`.")
        self._truncate(maxlen)
        encodings = self._tokenizer.encode_batch(list(texts))
        length = max(len(e.ids) for e in encodings)
        token_ids = np.zeros((len(encodings), length), "int32")
        segment_ids = np.zeros_like(token_ids)
        for row, e in enumerate(encodings):
            token_ids[row, : len(e.ids)] = e.ids
            segment_ids[row, : len(e.ids)] = e.type_ids
        return [token_ids, segment_ids]

    def _truncate(self, maxlen):
        maxlen = self.maxlen if maxlen is None else maxlen
        if maxlen < 3:
            raise ValueError(f"`maxlen` must leave room for [CLS] and [SEP], at least 3; got maxlen={maxlen}.")
        self._tokenizer.enable_truncation(maxlen, strategy="longest_first")
