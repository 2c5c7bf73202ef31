"""Similar sentences as they come out: `kwiden.similar` on held-out texts,
from the seed-0 models `benchmarks/simbert.py` trains (the same data,
split and settings), for both languages.

    python benchmarks/simbert_paraphrases.py --out benchmarks/results/simbert_paraphrases.md
"""

import argparse
import pathlib
import tempfile

import common  # noqa: F401  (first: the checkout's kwiden)
import simbert

import kwiden


def show(final, texts, n, candidates):
    lines = []
    for text, found in zip(texts, kwiden.similar(final, texts, n=n, candidates=candidates, seed=0)):
        lines.append(f"- {text}")
        lines += [f"  - {cosine:.3f} {sentence}" for sentence, cosine in found] or ["  - (nothing distinct)"]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=5, help="held-out texts a language")
    parser.add_argument("-n", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    # benchmarks/simbert.py's defaults (its results' settings)
    defaults = argparse.Namespace(eval_pairs=500, train_pairs=4000, mlm_updates=1000, zh_updates=200, zh_lr=5e-4,
                                  en_updates=150, en_lr=5e-5)  # fmt: skip
    report = ["# SimBERT's similar sentences, as they come out", "",
              f"`kwiden.similar` (n={args.n}, {args.candidates} candidates sampled from the 5 likeliest tokens, "
              "seed 0), on the first held-out text of several held-out pairs; the models are "
              "`benchmarks/simbert.py`'s seed-0 arms (cosine, then the sentence).", ""]  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        work = pathlib.Path(folder)
        train, pairs, evaluated = simbert.chinese_data(defaults)
        poems = work / "poems.txt"
        poems.write_text("\n".join("".join(passage) for passage in train) + "\n", encoding="utf-8")
        vocab = simbert.character_vocabulary(train, work / "vocab.txt")
        records = simbert.write_records(pairs, work / "zh_pairs.jsonl")
        mlm = simbert.pretrain_chinese_bert(poems, vocab, work / "zh_mlm", 0, defaults)
        sim = simbert.train_simbert(records, mlm.final, work / "zh_simbert", 0, defaults.zh_updates, defaults.zh_lr, 64)
        texts = [a for a, _ in evaluated[:: max(1, len(evaluated) // args.texts)]][: args.texts]
        report += ["## Chinese poems (BERT 128×4, MLM then SimBERT)", "", *show(sim.final, texts, args.n,
                   args.candidates), ""]  # fmt: skip
        pairs, evaluated = simbert.english_data(defaults)
        records = simbert.write_records(pairs, work / "en_pairs.jsonl")
        minilm = simbert.minilm_folder()
        sim = simbert.train_simbert(records, minilm, work / "en_simbert", 0, defaults.en_updates, defaults.en_lr, 32)
        texts = [a for a, _ in evaluated[:: max(1, len(evaluated) // args.texts)]][: args.texts]
        report += ["## Python docs (all-MiniLM-L6-v2, then SimBERT; its MLM head starts fresh)", "",
                   *show(sim.final, texts, args.n, args.candidates), ""]  # fmt: skip
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
