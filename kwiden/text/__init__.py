"""Text: BERT's WordPiece tokenizer (`tokenizer`), the tokenizers a corpus is read
with (`vocabulary`: bytes, WordPiece, a folder's own), the corpus that ships with
kwiden (`corpus`) and a corpus tokenized once into a token file (`tokens`).
"""
