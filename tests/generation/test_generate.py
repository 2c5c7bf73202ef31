"""Generation: the cached decoder computes what the whole model computes,
for every family that generates, and each search chooses as it says."""

import functools
import itertools

import keras
import numpy as np
import pytest

import kwiden
from kwiden.generation import Search, generate_ids, sampling
from kwiden.generation import prompts as prompts_module
from kwiden.generation.beams import beam_rows
from kwiden.generation.rollout import Decoder, Rollout
from kwiden.generation.sampling import choose, penalised, row_draws
from kwiden.testing import randomize_weights, tiny_config

RTOL = 1e-5
UNILM = ("bert", "roformer")
FAMILIES = ("gpt", "llama", "mistral", "qwen2", *UNILM)
PROMPTS = [[5, 7, 9, 11, 2], [3, 4], [8]]  # of different lengths: left padding is exercised


def built(family, seed=1, vocab_size=50, **config):
    config = tiny_config(vocab_size=vocab_size, **config)
    if family in ("llama", "mistral", "qwen2"):
        config["num_key_value_heads"] = 1  # grouped-query attention
    flags = dict(with_mlm=True, unilm=True) if family in UNILM else {}
    return randomize_weights(kwiden.build_transformer_model(config, model=family, **flags), seed=seed, std=0.3)


@pytest.fixture(scope="module")
def shared():
    """`built(family, seed, …)` built once for the module: the tests that only read a model share it, and with it
    its compiled decoder, so each search and shape is traced once, not once a test (a test that counts or drops
    what a model's decoder keeps builds its own)."""
    kept = {}

    def get(family, seed=1, **config):
        key = (family, seed, tuple(sorted(config.items())))
        if key not in kept:
            kept[key] = built(family, seed=seed, **config)
        return kept[key]

    return get


def full_logits(model, rows):
    """The logits after each row, from the whole model run on the whole row
    (a UniLM's prompt the first segment, the rest the second)."""
    out = []
    for prompt, tokens in rows:
        ids = np.array([[*prompt, *tokens]], np.int32)
        if any(layer.name == kwiden.models.naming.INPUT_SEGMENT for layer in model.layers):
            segments = np.array([[0] * len(prompt) + [1] * len(tokens)], np.int32)
            logits = model([ids, segments])[-1]
        else:
            logits = model(ids)
        out.append(keras.ops.convert_to_numpy(logits)[0, -1])
    return np.array(out, np.float64)


def logits_along(model, prompt, tokens):
    """The logits after the prompt and after each of `tokens`, from one run of the whole model on the
    whole row: a decoder's causal mask (a UniLM's second segment) makes each the logits of its prefix."""
    ids = np.array([[*prompt, *tokens]], np.int32)
    if any(layer.name == kwiden.models.naming.INPUT_SEGMENT for layer in model.layers):
        logits = model([ids, np.array([[0] * len(prompt) + [1] * len(tokens)], np.int32)])[-1]
    else:
        logits = model(ids)
    return np.asarray(keras.ops.convert_to_numpy(logits)[0, len(prompt) - 1 :], np.float64)


def argmax_rollout(model, prompt, steps):
    tokens = []
    for _ in range(steps):
        tokens.append(int(np.argmax(full_logits(model, [(prompt, tokens)])[0])))
    return tokens


# On JAX too: a decoder with grouped-query rotary attention, and a UniLM with a position table.
ON_BACKENDS = [pytest.param(f, marks=pytest.mark.backends) if f in ("llama", "bert") else f for f in FAMILIES]


@pytest.mark.parametrize("family", ON_BACKENDS)
def test_cached_logits_equal_the_whole_models_logits_at_each_position(family, shared):
    model = shared(family, seed=2)  # the greedy test's: its decoder, and the prompts' call in a buffer of 6
    decoder = prompts_module._decoder(model)
    rollout = Rollout(decoder, PROMPTS, 6)
    fed = np.random.default_rng(0).integers(1, 50, (6, len(PROMPTS)))
    logits = [rollout.start()] + [rollout.advance(tokens) for tokens in fed[:-1]]
    along = [logits_along(model, prompt, fed[:-1, row].tolist()) for row, prompt in enumerate(PROMPTS)]
    for step, got in enumerate(logits):
        want = np.array([row[step] for row in along])
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.abs(want).max())


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_equals_an_argmax_rollout_and_beam_one_equals_greedy(family, shared):
    model = shared(family, seed=2)
    greedy = generate_ids(model, PROMPTS, 6, Search(greedy=True))
    assert greedy == [[argmax_rollout(model, prompt, 6)] for prompt in PROMPTS]
    assert generate_ids(model, PROMPTS, 6, Search(beam=1)) == greedy


def test_a_grown_model_generates_what_the_small_one_does(shared):
    small = shared("gpt", seed=2)  # grow leaves it as it is
    big = kwiden.grow(small, 2)
    assert big.get_layer(kwiden.models.naming.EMBEDDING_TOKEN).output_dim == 32
    search = Search(greedy=True)
    assert generate_ids(big, PROMPTS, 6, search) == generate_ids(small, PROMPTS, 6, search)


def test_beam_search_wide_enough_is_exhaustive(shared):
    model = shared("gpt", seed=4, vocab_size=6)
    prompt = [1, 2, 3]
    along = logits_after(model, prompt)
    best = max(itertools.product(range(6), repeat=2), key=lambda pair: _log_probability(along, pair))
    found = generate_ids(model, [prompt], 2, Search(beam=36), num_samples=3)[0]
    assert found[0] == list(best)
    scores = [_log_probability(along, ids) for ids in found]
    assert scores == sorted(scores, reverse=True)


def test_a_beam_wider_than_the_continuations_says_how_many_it_found(shared):
    gpt = shared("gpt", seed=4, vocab_size=6)  # the exhaustive search's model: its beam of 36 compiled once
    with pytest.warns(UserWarning, match="found 25 continuations of prompt 0, not num_samples=30"):
        found = generate_ids(gpt, [[1, 2, 3]], 2, Search(beam=36), num_samples=30)[0]  # 5 tokens (not id 0), twice
    assert sorted(found) == [[a, b] for a in range(1, 6) for b in range(1, 6)]


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _log_probability(along, tokens):
    logits = along(tuple(tokens[:-1]))
    return sum(log_softmax(row)[token] for row, token in zip(logits, tokens))


def logits_after(model, prompt):
    """`logits_along(model, prompt, tokens)` as a function of `tokens` (a tuple), each run once: scoring every
    pair of tokens needs the whole model on each first token alone, not on each pair."""
    return functools.cache(lambda tokens: logits_along(model, prompt, list(tokens)))


def test_a_seed_makes_sampling_repeat_and_top_k_one_is_greedy(shared):
    model = shared("llama", seed=2)  # the greedy test's: its prompts' call and greedy loop of 6 tokens
    sample = dict(search=Search(temperature=1.5), num_samples=3)
    first = generate_ids(model, PROMPTS, 6, seed=7, **sample)
    assert generate_ids(model, PROMPTS, 6, seed=7, **sample) == first
    assert generate_ids(model, PROMPTS, 6, seed=8, **sample) != first
    greedy = generate_ids(model, PROMPTS, 6, Search(greedy=True))
    assert generate_ids(model, PROMPTS, 6, Search(top_k=1), seed=0) == greedy
    assert generate_ids(model, PROMPTS, 6, Search(top_p=1e-9), seed=0) == greedy


def test_sampling_draws_from_the_cut_distribution():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]] * 40000, np.float32))
    rng = np.random.default_rng(0)

    def frequencies(**search):
        chosen = keras.ops.convert_to_numpy(choose(logits, rng.random(len(logits), np.float32), **search))
        return np.bincount(chosen, minlength=4) / len(logits)

    np.testing.assert_allclose(frequencies(), [0.5, 0.3, 0.15, 0.05], atol=0.01)
    np.testing.assert_allclose(frequencies(top_k=2), [0.625, 0.375, 0, 0], atol=0.01)
    counts = frequencies(top_p=0.85)  # 0.5+0.3 < 0.85
    np.testing.assert_allclose(counts, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], atol=0.01)
    squared = np.array([0.25, 0.09, 0.0225, 0.0025])
    np.testing.assert_allclose(frequencies(temperature=0.5), squared / squared.sum(), atol=0.01)
    assert set(frequencies(greedy=True)) == {0.0, 1.0} and frequencies(greedy=True)[0] == 1.0


def test_end_tokens_and_max_new_tokens_stop_it(shared):
    model = shared("gpt", seed=2)  # the greedy test's: its greedy loop of 6 tokens
    greedy = generate_ids(model, PROMPTS, 6, Search(greedy=True))
    end = greedy[0][0][2]
    stopped = generate_ids(model, PROMPTS, 6, Search(greedy=True), end_ids=[end])
    for row, found in zip(greedy, stopped):
        ids = row[0]
        assert found[0] == (ids[: ids.index(end)] if end in ids else ids)
    assert [len(row[0]) for row in generate_ids(model, PROMPTS, 3, Search(greedy=True))] == [3, 3, 3]


@pytest.mark.parametrize(
    "search", [Search(greedy=True), Search(top_k=5, top_p=0.9), Search(beam=3)], ids=["greedy", "sampled", "beam"]
)
def test_the_new_tokens_are_chosen_in_one_compiled_loop_not_a_call_a_token(search):
    model = built("gpt", seed=6)
    decoder = prompts_module._decoder(model)
    calls = {"step": 0, "loop": 0}

    def counted(name, function):
        def call(*args):
            calls[name] += 1
            return function(*args)

        return call

    decoder.step = counted("step", decoder.step)
    expected = generate_ids(model, PROMPTS, 12, search, seed=3)
    decoder.loops = {key: counted("loop", loop) for key, loop in decoder.loops.items()}
    assert generate_ids(model, PROMPTS, 12, search, seed=3) == expected
    assert calls == {"step": 2, "loop": 1}  # the prompt each time; the 12 tokens once


def test_one_compiled_loop_serves_every_temperature_top_p_and_end_token():
    model = built("gpt", seed=6)
    for temperature, top_p, penalty, end in [(0.7, 0.9, 1.2, 3), (1.3, 0.5, 2.0, 4), (2.0, 0.99, 0.8, 5)]:
        search = Search(temperature=temperature, top_p=top_p, repetition_penalty=penalty)
        generate_ids(model, PROMPTS, 6, search, end_ids=[end], seed=0)
    assert len(prompts_module._decoder(model).loops) == 1


def test_one_row_of_a_wide_model_decodes_without_xla_to_the_same_tokens_as_in_a_batch():
    width = sampling.XLA_LEAST_WIDTH
    model = built("gpt", seed=6, hidden_size=width, num_attention_heads=8, intermediate_size=width)
    alone = generate_ids(model, [[3, 4]], 10, Search(greedy=True))
    assert generate_ids(model, [[3, 4], [3, 4]], 10, Search(greedy=True)) == alone * 2
    assert sorted(xla for *_, xla in prompts_module._decoder(model).loops) == [False, True]


def test_banned_tokens_never_come_out(shared):
    model = shared("gpt", seed=2)
    greedy = generate_ids(model, [[1, 2]], 6, Search(greedy=True))[0][0]
    found = generate_ids(model, [[1, 2]], 6, Search(temperature=3.0), banned=set(greedy), num_samples=4, seed=1)[0]
    assert all(token not in greedy for ids in found for token in ids)


def test_models_that_cannot_generate_are_refused():
    with pytest.raises(ValueError, match="no output of token logits"):
        generate_ids(kwiden.build_transformer_model(tiny_config()), [[1]], 2)
    with pytest.raises(ValueError, match="T5's relative positions"):
        generate_ids(kwiden.build_transformer_model(tiny_config(), model="t5"), [[1]], 2)
    model = built("gpt")
    with pytest.raises(ValueError, match="need 34 positions; the model has 32"):
        generate_ids(model, [[1] * 5], 30)
    with pytest.raises(ValueError, match="Prompt 1 must be 1 or more token ids below"):
        generate_ids(model, [[1], []], 2)
    with pytest.raises(ValueError, match="Prompt 0 must be 1 or more token ids below"):
        generate_ids(model, [[1, 2.5]], 2)  # not read as 2
    with pytest.raises(ValueError, match="end_ids=True: a token id is a whole number ≥ 0, not a bool"):
        generate_ids(model, [[1]], 2, end_ids=[True])  # not read as id 1
    with pytest.raises(ValueError, match="banned=1.5: a token id is a whole number ≥ 0, not a float"):
        generate_ids(model, [[1]], 2, banned=[1.5])


def test_beam_search_keeps_the_best_finished_and_unfinished_continuations():
    model = built("gpt", seed=4, vocab_size=6)
    prompt, end = [1, 2, 3], 5

    def log_probabilities(tokens):  # id 0, padding to this model, is never generated: out of the softmax
        return log_softmax(np.where(np.arange(6) == 0, -np.inf, full_logits(model, [(prompt, tokens)])[0]))

    first = log_probabilities([])
    scored = {(): first[end]}
    for a in range(1, 5):
        second = log_probabilities([a])
        scored[(a,)] = (first[a] + second[end]) / 2  # ended at its second token: two tokens long
        for b in range(1, 5):
            scored[(a, b)] = (first[a] + second[b]) / 2  # still going at max_new_tokens=2
    best = sorted(scored, key=lambda ids: -scored[ids])[:4]
    found = generate_ids(model, [prompt], 2, Search(beam=16), end_ids=[end], num_samples=4)[0]
    assert found == [list(ids) for ids in best]


def test_a_bert_without_the_unilm_mask_is_refused():
    bert = kwiden.build_transformer_model(tiny_config(vocab_size=50), with_mlm=True)
    with pytest.raises(ValueError, match="built without unilm=True"):
        generate_ids(bert, [[2, 5, 3]], 2)


def test_a_model_that_masks_padding_never_generates_it(shared):
    model = shared("gpt", seed=4, vocab_size=6)  # kwiden's decoders mask id 0 as padding
    found = generate_ids(model, [[3, 4], [1]], 6, Search(temperature=100.0), num_samples=20, seed=0)
    assert all(0 not in ids for samples in found for ids in samples)


def test_search_options_are_checked_where_they_are_made():
    for options, message in [
        (dict(beam=0), "beam=0: must be a whole number of at least 1"),
        (dict(top_k=0), "top_k=0: must"),
        (dict(temperature=1e-320), "temperature=1e-320: must be"),
        (dict(top_p=0.0), "top_p=0.0: must"),
        (dict(repetition_penalty=0.0), r"repetition_penalty=0.0: must be a number from 1e-06 to 1e\+06"),
        (dict(repetition_penalty=1e7), r"repetition_penalty=10000000.0: must be a number from 1e-06 to 1e\+06"),
        (dict(greedy=True, top_k=3), "Choose one of greedy=True, beam=K, or sampling"),
    ]:
        with pytest.raises(ValueError, match=message):
            Search(**options)
    with pytest.raises(ValueError, match="No prompts"):
        generate_ids(built("gpt"), [], 2)


def test_a_decoder_goes_with_its_model():
    import gc
    import weakref

    model = built("gpt")
    generate_ids(model, [[1, 2]], 2, Search(greedy=True))
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


class Scripted:
    """A decoder whose model gives the same next-token distribution at every step, for every row."""

    def __init__(self, probabilities):
        self.logits = np.log(np.asarray(probabilities, np.float32))[None, None]
        self.cached = self
        self.step, self.model, self.loops, self.vocab_size = self, keras.layers.Identity(), {}, self.logits.shape[-1]
        self.masks_padding, self.causal, self.attentions = False, True, ()

    def empty_cache(self, batch, length):
        return []

    def most_new_tokens(self, prompt_length):
        return None

    def __call__(self, token_ids, segment_ids, positions, mask, cache, index):
        return keras.ops.tile(keras.ops.convert_to_tensor(self.logits), (token_ids.shape[0], 1, 1)), cache


def test_beam_scores_are_the_finished_continuations_own():
    probabilities = np.array([0.054, 0.718, 0.019, 0.209])  # token 3 ends
    (found,) = beam_rows(Scripted(probabilities), [[1]], 6, 2, 2, [3], [])
    log = np.log(probabilities)
    # The ending first at step 0, then [1] ending: every prompt's beam finished, so the search stops there
    # (the beams still going are not ranked, and [1] keeps its own score, not one of a longer continuation).
    assert [ids for ids, _ in found] == [[1], []]
    np.testing.assert_allclose([score for _, score in found], [(log[1] + log[3]) / 2, log[3]], rtol=1e-6)


# With end id 10, FAST's beams of 2 both finish within 2 tokens; SLOW's run to max_new_tokens=8.
FAST, SLOW, END = [2, 5, 3], [2, 4, 3], 10


def test_a_prompt_beam_searches_the_same_alone_or_in_any_batch(shared):
    # The model's own decoder: the prompts' calls (1, 2 and 3 rows, 8 tokens on) are the sampling test's too.
    decoder = prompts_module._decoder(shared("gpt", seed=2, vocab_size=12))
    alone = {tuple(p): beam_rows(decoder, [p], 8, 2, 2, [END], [0])[0] for p in (FAST, SLOW)}
    assert max(len(ids) for ids, _ in alone[tuple(FAST)]) < 3  # the batch mixes a prompt done early
    assert min(len(ids) for ids, _ in alone[tuple(SLOW)]) == 8  # with one that runs to the end
    for batch in ([FAST, SLOW], [SLOW, FAST], [SLOW, FAST, SLOW]):
        for prompt, found in zip(batch, beam_rows(decoder, batch, 8, 2, 2, [END], [0])):
            want = alone[tuple(prompt)]
            assert [ids for ids, _ in found] == [ids for ids, _ in want]
            np.testing.assert_allclose([s for _, s in found], [s for _, s in want], rtol=1e-6)
    together = generate_ids(decoder, [FAST, SLOW], 8, Search(beam=2), end_ids=[END], num_samples=2)
    assert together == [[ids for ids, _ in alone[tuple(p)]] for p in (FAST, SLOW)]


def test_a_prompt_samples_the_same_alone_or_in_any_batch(shared):
    model = shared("gpt", seed=2, vocab_size=12)
    sample = dict(search=Search(temperature=2.0), end_ids=[END], num_samples=3, seed=5)
    alone = [generate_ids(model, [prompt], 8, **sample)[0] for prompt in (FAST, SLOW)]
    assert generate_ids(model, [FAST, SLOW], 8, **sample) == alone
    assert generate_ids(model, [SLOW, FAST, SLOW], 8, **sample) == [alone[1], alone[0], alone[1]]
    assert len({tuple(ids) for ids in alone[1]}) > 1  # each sample draws its own tokens


def test_decoding_that_would_not_fit_in_memory_is_refused_before_it_starts():
    model = built("llama")  # rotary: no position table stops it
    with pytest.raises(ValueError, match=r"max_new_tokens=1000000000 needs about .* TB .* the most that fit: "
                       r"max_new_tokens=\d+ \(with num_samples=4\)"):  # fmt: skip
        generate_ids(model, PROMPTS, 10**9, num_samples=4, seed=0)


def test_the_most_that_fits_in_memory_is_what_the_refusal_names(monkeypatch):
    from kwiden.generation import footprint

    model = built("llama")
    room = sum(footprint.decoding_bytes(Decoder(model), [[1, 2, 3]], repeats=3, max_new_tokens=20))  # on the CPU
    monkeypatch.setattr(footprint, "available_memory", lambda: room)
    with pytest.raises(ValueError, match=r"the most that fit: max_new_tokens=20 \(with num_samples=3\), or "
                       r"num_samples=2 \(with max_new_tokens=21\)"):  # fmt: skip
        generate_ids(model, [[1, 2, 3]], 21, num_samples=3, seed=0)
    with pytest.raises(ValueError, match=r"the most that fit: max_new_tokens=20 \(with beam=3\)"):
        generate_ids(model, [[1, 2, 3]], 21, Search(beam=3))
    assert len(generate_ids(model, [[1, 2, 3]], 20, num_samples=3, seed=0)[0]) == 3  # what it named runs


def test_on_an_accelerator_the_cache_is_held_to_the_devices_free_memory(monkeypatch):
    from kwiden.generation import footprint

    model = built("llama")
    device, host = footprint.decoding_bytes(Decoder(model), [[1, 2, 3]], repeats=3, max_new_tokens=20)
    monkeypatch.setattr(footprint, "accelerated", lambda: True)
    monkeypatch.setattr(footprint, "available_memory", lambda: host * 100)  # the host has room for all of it
    monkeypatch.setattr(footprint, "device_memory", lambda: device)
    with pytest.raises(ValueError, match=r"is free on the accelerator: the most that fit: max_new_tokens=20 "):
        footprint.check_memory(Decoder(model), [[1, 2, 3]], 21, 3, "num_samples")
    footprint.check_memory(Decoder(model), [[1, 2, 3]], 20, 3, "num_samples")  # what it named fits
    monkeypatch.setattr(footprint, "device_memory", lambda: None)  # a backend that does not say: the host's part only
    footprint.check_memory(Decoder(model), [[1, 2, 3]], 1000, 3, "num_samples")


def test_a_repetition_penalty_divides_the_positive_logits_of_present_tokens_and_multiplies_the_negative():
    logits = np.array([[2.0, -1.0, 3.0, -0.5]], np.float32)
    present = np.array([[True, True, False, False]])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(penalised(logits, present, 2.0)), [[1.0, -2.0, 3.0, -0.5]])


def penalised_rollout(model, prompt, steps, penalty, end, pick=np.argmax):
    """Tokens chosen by `pick` from the whole model's logits, each token of the prompt (but `end`) and of the
    continuation penalised; stopped at `end`."""
    tokens, present = [], set(prompt) - {end}
    for step in range(steps):
        logits = full_logits(model, [(prompt, tokens)])[0]
        logits[0] = -np.inf if prompts_module._decoder(model).cached.masks_padding else logits[0]  # padding: banned
        held = np.isin(np.arange(len(logits)), sorted(present))
        token = int(pick(np.where(held, np.where(logits > 0, logits / penalty, logits * penalty), logits), step))
        if token == end:
            break
        tokens.append(token)
        present.add(token)
    return tokens


@pytest.mark.parametrize("family", ["gpt", pytest.param("bert", marks=pytest.mark.backends)])
def test_greedy_with_a_repetition_penalty_is_a_penalised_argmax_rollout_that_still_ends(family, shared):
    model = shared(family, seed=2, vocab_size=12)
    prompts, end = [[5, 7, 9, 5, 10], [3, 4, 10]], 10  # the end token in a prompt is not penalised
    found = generate_ids(model, prompts, 8, Search(greedy=True, repetition_penalty=3.0), end_ids=[end])
    assert found == [[penalised_rollout(model, prompt, 8, 3.0, end, lambda x, _: np.argmax(x))] for prompt in prompts]
    assert found != generate_ids(model, prompts, 8, Search(greedy=True), end_ids=[end])  # the penalty told


def test_sampling_with_a_repetition_penalty_draws_from_the_penalised_distribution(shared):
    model = shared("gpt", seed=2, vocab_size=12)
    prompt, seed = [5, 7, 9], 4  # 8 tokens: the length the other tests of this model decode one prompt to
    draws = row_draws(seed, [prompt], 1, 8)[0]

    def sampled(logits, step):
        return keras.ops.convert_to_numpy(choose(logits[None].astype(np.float32), draws[step : step + 1]))[0]

    found = generate_ids(model, [prompt], 8, Search(repetition_penalty=1.7), seed=seed)[0][0]
    assert found == penalised_rollout(model, prompt, 8, 1.7, None, sampled)


def test_beam_search_with_a_repetition_penalty_ranks_the_penalised_log_probabilities(shared):
    model = shared("gpt", seed=4, vocab_size=6)
    decoder = prompts_module._decoder(model)
    prompt, penalty = [1, 2, 3], 1.5
    along = logits_after(model, prompt)

    def scores(tokens):  # log-probabilities without id 0 (padding), those of held tokens multiplied
        logits = np.where(np.arange(6) == 0, -np.inf, along(tuple(tokens))[-1])
        held = np.isin(np.arange(6), [*prompt, *tokens])
        return np.where(held, log_softmax(logits) * penalty, log_softmax(logits))

    first = scores([])
    scored = {(a, b): (first[a] + scores([a])[b]) / 2 for a in range(1, 6) for b in range(1, 6)}
    best = sorted(scored, key=lambda ids: -scored[ids])[:4]
    (found,) = beam_rows(decoder, [prompt], 2, 25, 4, [], [0], repetition_penalty=penalty)
    assert [ids for ids, _ in found] == [list(ids) for ids in best]
    np.testing.assert_allclose([score for _, score in found], [scored[ids] for ids in best], rtol=RTOL)
    # Without the penalty: a beam of 36 keeps every one of the 25 continuations too (the exhaustive test's loop).
    assert found != beam_rows(decoder, [prompt], 2, 36, 4, [], [0])[0]


@pytest.mark.parametrize("penalty", [1e6, 1e-6])
def test_the_most_extreme_repetition_penalties_still_choose_real_tokens(penalty, shared):
    model = shared("gpt", seed=2, vocab_size=12)  # a penalty is a value of the loop: both share it
    every = list(range(1, 12))  # every token present: each penalised, none to ±inf or NaN
    for search in (Search(greedy=True, repetition_penalty=penalty), Search(repetition_penalty=penalty),
                   Search(beam=2, repetition_penalty=penalty)):  # fmt: skip
        found = generate_ids(model, [every], 8, search, seed=0)[0][0]
        assert len(found) == 8 and all(1 <= token < 12 for token in found), (search, found)
