"""`kwiden.Generator`: a checkpoint folder loaded once, and `.generate(prompts, max_new_tokens=…)` with the
names transformers' `model.generate` and KerasHub's `CausalLM.generate` give their arguments, on
`kwiden.generate` (whose checks it reuses, their refusals spelled with its names)."""

from kwiden.generation.arguments import ArgumentError
from kwiden.generation.prompts import generate, load_generator

# kwiden.generate's names, as this entry point spells them (transformers').
NAMES = {"greedy": "do_sample=False", "beam": "num_beams", "num_samples": "num_return_sequences"}


class Generator:
    """A model and its tokenizer loaded from a checkpoint folder (a `kwiden
    pretrain` run's `final/`, a Hugging Face decoder's folder, a SimBERT's),
    to generate text from as transformers' and KerasHub's models do.

    `model` and `tokenizer` are what `kwiden.generation.load_generator`
    gives; `generate` decodes with `kwiden.generate`.

    Example (a tiny random GPT on bytes):

    >>> import tempfile, kwiden
    >>> from kwiden.text.vocabulary import byte_tokenizer
    >>> folder = tempfile.mkdtemp()
    >>> gpt = kwiden.build_transformer_model(dict(vocab_size=258, hidden_size=16, num_hidden_layers=1,
    ...     num_attention_heads=2, mask_padding=False), model="gpt")
    >>> _ = kwiden.save_checkpoint(gpt, folder), byte_tokenizer().save(folder)
    >>> generator = kwiden.Generator(folder)
    >>> text = generator.generate("Hello", max_new_tokens=4, do_sample=False)
    >>> isinstance(text, str), len(generator.generate(["a", "b"], max_new_tokens=2, seed=0))
    (True, 2)
    """

    def __init__(self, checkpoint):
        self.checkpoint = checkpoint
        self.model, self.tokenizer = load_generator(checkpoint)

    def generate(self, prompts, max_new_tokens=32, do_sample=None, temperature=1.0, top_k=None, top_p=1.0,
                 repetition_penalty=1.0, num_beams=1, num_return_sequences=1, seed=None,
                 end_tokens=None):  # fmt: skip
        """The continuation of each prompt (a decoder's, without the prompt;
        a UniLM's second segment), as `kwiden.generate` writes it.

        Args:
            prompts: a text, or a list of texts.
            max_new_tokens: tokens generated at most a continuation.
            do_sample: sample (the distribution at `temperature`, cut to the
                `top_k` likeliest tokens and to the smallest set with
                probability `top_p`); False: the likeliest token each step,
                or a beam search where `num_beams` > 1. By default: sample,
                unless `num_beams` > 1 (unlike transformers, whose default is
                greedy unless a folder's generation_config.json says to sample:
                kwiden reads no sampling settings from it).
            num_beams: a beam search of this many continuations (1: none).
            num_return_sequences: continuations a prompt.
            repetition_penalty, seed, end_tokens: as `kwiden.generate`'s.

        Returns:
            For one text, its continuation (a text), or a list of
            `num_return_sequences` of them; for a list, one such item a prompt.
        """
        beam = None if num_beams == 1 else num_beams
        if do_sample and beam is not None:
            raise ArgumentError("num_beams={value!r} with do_sample=True: kwiden's beam search does not sample; give "
                                "do_sample=False (or leave it out) for a beam search.", value=num_beams)  # fmt: skip
        greedy = do_sample is False and beam is None
        try:
            found = generate(self.model, self.tokenizer, prompts, max_new_tokens, greedy=greedy, beam=beam,
                             top_k=top_k, top_p=top_p, temperature=temperature,
                             repetition_penalty=repetition_penalty, num_samples=num_return_sequences,
                             seed=seed, end_tokens=end_tokens)  # fmt: skip
        except ArgumentError as error:
            raise error.respelled(NAMES) from None
        if num_return_sequences != 1:
            return found
        return found[0] if isinstance(prompts, str) else [texts[0] for texts in found]
