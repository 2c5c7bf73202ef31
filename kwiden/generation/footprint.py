"""The memory decoding holds, estimated from the caller's numbers before
anything is allocated: a `max_new_tokens` of a billion on a rotary model
(no position table to refuse it) would otherwise allocate its whole
key/value cache at once and die, or be killed by the kernel."""

import numpy as np

from kwiden.generation.arguments import ArgumentError
from kwiden.generation.rollout import buffer_length
from kwiden.memory import accelerated, available_memory, device_memory, readable_size

# Bytes of the float32 attention scores and their softmax, for each query, head and key.
SCORE_BYTES = 2 * 4
# Bytes of the host's logits after the prompts: float64, and the float32 copy the loop is given.
LOGIT_BYTES = 8 + 4
# Bytes of the device's float32 logits and what the compiled loop's choosing makes of them (penalised, scaled,
# cut, softmax, sorted, cumulative sums), and which tokens each row holds (bool, the old and the new).
DEVICE_LOGIT_BYTES = 7 * 4 + 2
# Bytes of a slot of the host's token and seen buffers (int32 and bool), each held twice while rows are copied.
SLOT_BYTES = 2 * (4 + 1)
# Bytes of a new token in a row's history and a finished set's (int32), the history held twice while it is
# reordered (beam search).
HISTORY_BYTES = 3 * 4


def decoding_bytes(decoder, prompts, repeats, max_new_tokens):
    """About the most bytes decoding `prompts` (lists of ids), `repeats` rows
    each, to `max_new_tokens` more holds at once: `(on the device, on the
    host)`; both on the host where the device is the CPU.

    On the device: the key/value cache of every attention layer, twice (a
    step, a repeat or a beam's reorder writes a new one beside the old), and
    one layer's attention at a time (its scores, and its keys and values
    spread to every query head) over the prompts' pass or a step's, the
    larger; the logits and what the compiled loop's choosing makes of them,
    the tokens chosen. On the host: the token buffers and the prompts'
    logits."""
    length = buffer_length(prompts, max_new_tokens)
    queries = length - max_new_tokens  # the prompts' pass: every prompt slot of every prompt
    rows = len(prompts) * repeats
    cache = 2 * rows * length * _cache_per_token(decoder)
    attention = max(_attention_bytes(decoder, layer, len(prompts) * queries, rows, length) for layer in
                    decoder.cached.attentions)  # fmt: skip
    mask = len(prompts) * queries * length  # the prompts' pass: which slots each query sees
    host = rows * (length * SLOT_BYTES + decoder.vocab_size * LOGIT_BYTES)
    chosen = rows * (decoder.vocab_size * DEVICE_LOGIT_BYTES + max_new_tokens * HISTORY_BYTES)
    return cache + attention + mask + chosen, host


def _attention_bytes(decoder, layer, prompt_queries, rows, length):
    """One attention layer's scores for the prompts' pass or a step's queries (the more), and its keys and
    values spread to every query head."""
    itemsize = _itemsize(decoder.cached.model.compute_dtype)
    scores = max(prompt_queries, rows) * layer.heads * length * SCORE_BYTES
    return scores + rows * length * layer.heads * layer.head_size * 2 * itemsize


def check_memory(decoder, prompts, max_new_tokens, repeats, rows_name):
    """Refuse decoding that would not fit in the memory available now,
    naming `max_new_tokens` and `rows_name` (the argument that gives
    `repeats`: `num_samples`, `beam`) and the most of each that would fit.
    On a GPU or TPU the cache and the attention are held to the device's
    free memory where the backend says it (`kwiden.memory.device_memory`),
    the rest to the host's."""
    host_room = available_memory()
    device_room = device_memory() if accelerated() else None
    fits = _fits(decoder, prompts, host_room, device_room)
    if fits(repeats, max_new_tokens):
        return
    device, host = decoding_bytes(decoder, prompts, repeats, max_new_tokens)
    most_tokens = _most(lambda n: fits(repeats, n), max_new_tokens)
    most_rows = _most(lambda n: fits(n, max_new_tokens), repeats)
    options = ([f"{{max_new_tokens}}={most_tokens} (with {{rows}}={repeats})"] if most_tokens else []) + (
        [f"{{rows}}={most_rows} (with {{max_new_tokens}}={max_new_tokens})"] if most_rows else []
    )
    advice = f"the most that fit: {', or '.join(options)}" if options else "fewer prompts"
    on_device = device_room is not None and device > device_room
    available, where = (device_room, "free on the accelerator") if on_device else (host_room, "available")
    raise ArgumentError(
        "Decoding {prompts} prompt(s), {rows}={repeats} rows each, to {max_new_tokens}={value} needs about {need} "
        "(a key/value cache of {per_token} a row a token, the attention's scores, the logits), and {available} is "
        "{where}: " + advice + (", or fewer prompts" if options and len(prompts) > 1 else "") + ".",
        names={"rows": rows_name}, prompts=len(prompts), repeats=repeats, value=max_new_tokens,
        need=readable_size(device + host, "kB"), per_token=readable_size(_cache_per_token(decoder), "B"),
        available=readable_size(available, "kB"), where=where,
    )  # fmt: skip


def _fits(decoder, prompts, host_room, device_room):
    """Whether `(repeats, max_new_tokens)` fit: on a CPU the whole in `host_room` bytes; on an accelerator the
    device's part in `device_room` (where known) and the host's in `host_room`. None: unknown, not checked."""
    on_cpu = not accelerated()

    def fits(repeats, max_new_tokens):
        device, host = decoding_bytes(decoder, prompts, repeats, max_new_tokens)
        on_host = host + (device if on_cpu else 0)
        return (host_room is None or on_host <= host_room) and (device_room is None or device <= device_room)

    return fits


def _most(fits, below):
    """The largest whole number under `below` for which `fits` holds (it holds for all smaller), or 0."""
    low, high = 0, below - 1
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _cache_per_token(decoder):
    """Bytes of keys and values a row keeps for each token, over every attention layer."""
    layers = decoder.cached.attentions
    itemsize = _itemsize(decoder.cached.model.compute_dtype)
    return sum(2 * layer.heads_of("key") * layer.head_size for layer in layers) * itemsize


def _itemsize(dtype):
    return 2 if dtype in ("bfloat16", "float16") else np.dtype(dtype).itemsize
