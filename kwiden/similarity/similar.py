"""Similar sentences, as SimBERT finds them: sample many second segments
from a UniLM given the text as its first, and keep those whose sentence
vectors lie closest to the text's."""

from kwiden.generation.arguments import ArgumentError, SimilarOptions, checked
from kwiden.generation.prompts import generate, load_generator, most_new_tokens
from kwiden.similarity.sentence import ENCODERS, SentenceEncoder


def similar(checkpoint, texts, n=5, candidates=100, top_k=5, max_new_tokens=None, seed=None):
    """The `n` generated sentences most similar to each text, best first.

    Args:
        checkpoint: a BERT or RoFormer folder trained as a UniLM
            (`kwiden pretrain --objective simbert` or `seq2seq`: its `final/`).
        texts: a text, or a list of them (generated together, those of
            one length in one batch; each gets what it gets alone).
        n: sentences kept a text.
        candidates: sentences sampled a text before ranking (SimBERT's 100).
        top_k: each token sampled from the `top_k` likeliest (SimBERT's 5).
        max_new_tokens: tokens a candidate at most; by default twice the
            text's and 2 more, or as many as the model's positions and the
            length its checkpoint was trained on allow, if fewer (each text
            its own: a text gets what it gets alone).
        seed: makes the sampling repeat.

    Returns:
        For one text, a list of `(sentence, cosine)` pairs: distinct
        sentences, not the text itself, by the cosine of their sentence
        vectors to the text's (`SentenceEncoder`'s default pooling: the
        pooler, as SimBERT ranks, where the checkpoint holds it, else
        `[CLS]`); for a list, one such list a text. Fewer than `n` where fewer distinct sentences came out.
    """
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    checked(SimilarOptions, dict(n=n, candidates=candidates, top_k=top_k, max_new_tokens=max_new_tokens, seed=seed))
    if n > candidates:
        raise ArgumentError("{n}={value!r}: must be a whole number from 1 to {candidates}={most}.", value=n,
                            most=candidates)  # fmt: skip
    if not texts:
        raise ValueError("No texts: give one or more.")
    model, tokenizer = load_generator(checkpoint)
    if model.family not in ENCODERS or tokenizer.cls is None or tokenizer.separator is None:
        raise ValueError(f"kwiden.similar reads a BERT or RoFormer trained as SimBERT, with its tokenizer ([CLS] and "
                         f"[SEP]); {checkpoint} holds a {model.family} with {tokenizer.source}.")  # fmt: skip
    lengths = _default_lengths(model, tokenizer, texts) if max_new_tokens is None else [max_new_tokens] * len(texts)
    sampled = _sampled(model, tokenizer, texts, lengths, dict(top_k=top_k, num_samples=candidates, seed=seed))
    encoder = SentenceEncoder(checkpoint, model=model)  # the generator's weights, read once
    found = [_ranked(encoder, tokenizer, text, sentences, n) for text, sentences in zip(texts, sampled)]
    return found[0] if single else found


def _sampled(model, tokenizer, texts, lengths, options):
    """Each text's candidates, sampled to its own length (the texts of one length in one batch), as it
    samples them alone; a refusal names generate's `num_samples` as similar's `candidates`."""
    sampled = [None] * len(texts)
    for length in sorted(set(lengths)):
        batch = [i for i, own in enumerate(lengths) if own == length]
        try:
            found = generate(model, tokenizer, [texts[i] for i in batch], length, **options)
        except ArgumentError as error:
            raise error.respelled({"num_samples": "candidates"}) from None
        for i, sentences in zip(batch, found):
            sampled[i] = sentences
    return sampled


def _default_lengths(model, tokenizer, texts):
    """Each text's own default: twice its tokens and 2 more, or as many as the model's positions and its
    trained length leave its prompt (`[CLS] text [SEP]`), if fewer."""
    lengths = []
    for index, ids in enumerate(tokenizer.encode_lines(texts)[0]):
        most = most_new_tokens(model, len(ids) + 2)
        if most is not None and most < 1:
            raise ValueError(f"Text {index} has {len(ids)} tokens: with [CLS] and [SEP] they fill every position "
                             "the model reads (or was trained on), leaving none to generate in; shorten it.")  # fmt: skip
        lengths.append(2 * len(ids) + 2 if most is None else min(2 * len(ids) + 2, most))
    return lengths


def _ranked(encoder, tokenizer, text, sentences, n):
    """The best `n` distinct sentences by cosine; those the tokenizer reads as the text itself left out."""
    candidates = [s for s in dict.fromkeys(s.strip() for s in sentences) if s]
    ids, _ = tokenizer.encode_lines([text, *candidates])  # one batch
    distinct = [s for s, tokens in zip(candidates, ids[1:]) if tokens.tolist() != ids[0].tolist()]
    if not distinct:
        return []
    cosines = encoder.similarity(text, distinct)[0]
    order = sorted(range(len(distinct)), key=lambda i: -cosines[i])[:n]
    return [(distinct[i], float(cosines[i])) for i in order]
