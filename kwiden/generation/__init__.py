"""Text generation for every family kwiden builds: decoders (GPT, LLaMA,
Mistral, Qwen2) continue a prompt; a UniLM (a BERT or RoFormer trained with
`--objective seq2seq` or `simbert`) is given the first segment and writes
the second (`prompts`). Prompts and samples decode together in one batch,
with a key/value cache (`cache`), searched as `search` says."""

from kwiden.exports import lazy as _lazy

_NAMES = {
    "Search": "kwiden.generation.search",
    **dict.fromkeys(("generate", "generate_ids", "load_generator", "most_new_tokens"), "kwiden.generation.prompts"),
}
__getattr__, __dir__ = _lazy(__name__, _NAMES)
__all__ = sorted(_NAMES)
