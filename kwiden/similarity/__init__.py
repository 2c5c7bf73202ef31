"""Similarity: sentence vectors (`sentence.SentenceEncoder`), their evaluation on
scored and retrieval pairs (`sts`), and SimBERT's `similar` sentences (`similar`).
"""
