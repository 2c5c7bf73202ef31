"""How to choose the tokens: `Search`, greedy, sampled with temperature,
top-k and top-p (run by `sampling`), or by beam search (run by `beams`),
each with a repetition penalty where asked."""

import dataclasses

from kwiden.generation.arguments import ArgumentError, GenerateOptions, checked


@dataclasses.dataclass(frozen=True)
class Search:
    """How to choose each next token: `greedy`, by a beam search of `beam`
    continuations, or by sampling from the distribution at `temperature`,
    cut to the `top_k` likeliest tokens and to the smallest set holding
    `top_p` of the probability; with any of them, a `repetition_penalty`
    (1: none) makes the tokens already in a row less likely
    (`sampling.penalised`)."""

    greedy: bool = False
    beam: int = None
    top_k: int = None
    top_p: float = 1.0
    temperature: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        sampling = self.top_k is not None or self.top_p != 1.0 or self.temperature != 1.0
        if self.greedy and self.beam is not None or (self.greedy or self.beam is not None) and sampling:
            raise ArgumentError(
                "Choose one of {greedy}, {beam}=K, or sampling ({top_k}=K, {top_p}=P, {temperature}=T)."
            )
        values = dict(greedy=self.greedy, beam=self.beam, top_k=self.top_k, top_p=self.top_p,
                      temperature=self.temperature, repetition_penalty=self.repetition_penalty)  # fmt: skip
        for name, value in checked(GenerateOptions, values).items():
            object.__setattr__(self, name, value)

    @property
    def samples(self):
        return not self.greedy and self.beam is None
