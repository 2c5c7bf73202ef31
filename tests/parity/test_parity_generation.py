"""UniLM generation (SimBERT's similar sentences, bert4keras' seq2seq examples) from the Google checkpoints
with their MLM head: `kwiden.generation.generate_ids`, several prompts of different lengths in one batch,
against bert4keras' decoding of each prompt alone with the numpy BERT / RoFormer.

References (parity_reference.py): snippets.AutoRegressiveDecoder.beam_search, with the `predict` of
simbert.py's SynonymsGenerator and of bert4keras' seq2seq examples (the whole sequence recomputed each step,
the prompt `[CLS] text [SEP]` segment 0, the generated tokens segment 1, log(probas + 1e-12)). bert4keras has
no separate greedy search: its examples decode greedily with beam_search(topk=1), which is what greedy is
held to here.

Where the two differ, and what is not held:
- kwiden never generates id 0 (a model that masks id 0 as padding cannot read one it wrote); bert4keras does
  not ban it. The checkpoints make [PAD] improbable (parity_checkpoints.PAD_LOWERED), so both choose alike.
- The end token: bert4keras returns it in the output, kwiden leaves it out (compared without it).
- Beam search with an end token follows different rules: bert4keras returns the best beam by its sum of
  log-probabilities as soon as that beam ends (and drops other finished beams), while kwiden ranks finished
  continuations by their sum over their length (transformers' length_penalty=1.0) and stops a prompt once
  `beam` have finished (transformers' early_stopping=True). Beam search is held to bert4keras' without an
  end token only, where both rank by the sum over continuations of one length.
"""

import parity_reference as reference
import pytest
from parity_checkpoints import VOCAB, checkpoint_fixture

import kwiden
from kwiden.generation import Search, generate_ids, load_generator

# The session's Google checkpoints (parity_checkpoints.checkpoint_fixture).
google_bert_fixture = checkpoint_fixture("bert")
google_roformer_fixture = checkpoint_fixture("roformer")

PROMPTS = ["the cat sat on the mat", "sun", "who is big and red", "a dog", "moon or sky"]
NEW_TOKENS = 6
SEP = VOCAB.index("[SEP]")


_GENERATORS = {}


def generator(checkpoint):
    """kwiden's UniLM on a checkpoint (built once a session), and bert4keras' decoding of one prompt with the
    reference."""
    if checkpoint.folder not in _GENERATORS:
        if checkpoint.rotary:  # bert4keras' model='roformer', application='unilm'
            model = kwiden.build_transformer_model(checkpoint_path=checkpoint.folder, model="roformer",
                                                   with_mlm=True, unilm=True)  # fmt: skip
        else:  # kwiden's own loader of a generator's folder
            model, _ = load_generator(checkpoint.folder)
        predict = reference.unilm_predict(checkpoint.weights, checkpoint.config, rotary=checkpoint.rotary)

        def decode(text, topk, end_id=None):
            return reference.beam_search(predict, reference.encode(VOCAB, text), topk, end_id, NEW_TOKENS).tolist()

        _GENERATORS[checkpoint.folder] = model, decode
    return _GENERATORS[checkpoint.folder]


@pytest.fixture(params=["bert", "roformer"])
def unilm(request):
    return generator(request.getfixturevalue(f"google_{request.param}"))


def prompt_ids():
    return [reference.encode(VOCAB, text)[0] for text in PROMPTS]


def test_greedy_is_beam_search_of_one(unilm):
    model, decode = unilm
    found = generate_ids(model, prompt_ids(), NEW_TOKENS, Search(greedy=True))
    assert found == [[decode(text, topk=1)] for text in PROMPTS]
    assert len({tuple(ids) for [ids] in found}) == len(PROMPTS)  # the prompts are read, each its own way


def test_greedy_stops_at_the_end_token(google_bert):
    """SimBERT's end, [SEP], on the BERT (the RoFormer's greedy continuations hold none)."""
    model, decode = generator(google_bert)
    want = [decode(text, topk=1, end_id=SEP) for text in PROMPTS]
    stopped = [ids[-1] == SEP for ids in want]
    assert any(stopped) and not all(stopped)  # some rows stop and some run to the end
    assert len({len(ids) for ids, stop in zip(want, stopped) if stop}) > 1  # rows stop at their own steps
    found = generate_ids(model, prompt_ids(), NEW_TOKENS, Search(greedy=True), end_ids=[SEP])
    assert found == [[ids[:-1] if ids[-1] == SEP else ids] for ids in want]  # bert4keras keeps the end token


@pytest.mark.parametrize("beam", [2, 3])
def test_beam_search_without_an_end_token_is_bert4keras(unilm, beam):
    model, decode = unilm
    want = [decode(text, topk=beam) for text in PROMPTS]
    assert want != [decode(text, topk=1) for text in PROMPTS]  # the beams find what greedy does not
    found = generate_ids(model, prompt_ids(), NEW_TOKENS, Search(beam=beam))
    assert found == [[ids] for ids in want]
