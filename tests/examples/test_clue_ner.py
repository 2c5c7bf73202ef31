"""The CLUENER2020 baseline (examples/clue/cluener.py): three heads end to
end on a tiny fixture in CLUENER's format, windows over long texts put back
together, entity-level scores, and bad data refused before training."""

import dataclasses
import json
import runpy
import shutil
import types

import keras
import numpy as np
import pytest
from test_clue import CLUE, FIXTURES, model_files, run, snippets_importable  # noqa: F401 (fixtures)

HEADS = ("globalpointer", "efficient", "crf")


@pytest.fixture()
def cluener():
    return runpy.run_path(str(CLUE / "cluener.py"))


def json_lines(path):
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@pytest.mark.parametrize("head", HEADS)
def test_each_head_learns_the_fixture_and_predicts_every_test_text(head, model_files, tmp_path):  # noqa: F811
    result = run("cluener", model_files, tmp_path, None, "--head", head, "--epochs", "8", "--batch-size", "8",
                 "--maxlen", "16", lr="3e-3")  # fmt: skip
    assert result["dev_f1"] == 1.0  # the fixture's entities sit in set phrases: learnable by a tiny BERT
    assert len(result["seconds_per_epoch"]) == 8
    predicted = json_lines(result["predictions"])
    texts = json_lines(FIXTURES / "cluener" / "test.json")
    assert [p["id"] for p in predicted] == [t["id"] for t in texts]
    for record, text in zip(predicted, texts):
        for entities in record["label"].values():
            for entity, places in entities.items():
                assert all(text["text"][start : end + 1] == entity for start, end in places)
    # The last test text (42 characters) is cut into windows of 14: entities are found past the first window.
    assert max(end for entities in predicted[-1]["label"].values() for places in entities.values()
               for _, end in places) >= 14  # fmt: skip


def test_grown_with_accumulation(model_files, tmp_path):  # noqa: F811
    """The crf head's run above, widened twice and at batches of 4 two to an update (the same 8 examples an
    update): it learns the fixture as the plain run does. Margin 0: both scored dev F1 1.0 on seeds 0, 1 and 2."""
    result = run("cluener", model_files, tmp_path, None, "--grow", "2", "--accum-steps", "2", "--head", "crf",
                 "--epochs", "8", "--batch-size", "4", "--maxlen", "16", lr="3e-3")  # fmt: skip
    assert result["dev_f1"] == 1.0
    predicted = json_lines(result["predictions"])
    assert [p["id"] for p in predicted] == [t["id"] for t in json_lines(FIXTURES / "cluener" / "test.json")]


def test_windows_overlap_and_their_spans_map_back_to_characters(cluener, model_files):  # noqa: F811
    tokens = cluener["snippets"].CharacterTokens(model_files / "vocab.txt")
    text = cluener["Text"](
        None, "张三去了 北京。李四在华为公司工作。", {("name", 0, 1), ("address", 5, 6), ("company", 11, 14)}, 1
    )
    args = types.SimpleNamespace(maxlen=8, stride=3)
    windows = cluener["windows_of"]([text], tokens, ["address", "company", "name"], args)
    # 18 characters (the space one too), 6 a window from 0, 3, 6, 9, 12.
    assert [len(w.token_ids) for w in windows] == [8, 8, 8, 8, 8]
    assert [w.start for w in windows] == [0, 3, 6, 9, 12]
    assert windows[0].label == [(2, 1, 2)]  # name at tokens 1-2; the address (characters 5-6) ends past it
    assert windows[1].label == [(0, 3, 4)]  # from character 3: 了, the space, then the address at tokens 3-4
    assert all(kind != 1 for w in windows[:2] for kind, _, _ in w.label)  # the company lies in no early window
    spans = {(kind, w.start + first - 1, w.start + last - 1) for w in windows for kind, first, last in w.label}
    assert spans == {(0, 5, 6), (1, 11, 14), (2, 0, 1)}


def random_text(rng, cluener, length, room):
    """A text of `length` characters with entities of 1 to a window and a half, some nested."""
    spans = set()
    for _ in range(int(rng.integers(0, 6))):
        first = int(rng.integers(length))
        last = min(length - 1, first + int(rng.integers(0, room + room // 2)))
        spans.add(("name", first, last))
    return cluener["Text"](None, "张" * length, spans, 1)


def held(windows, text):
    """The text's spans that lie whole in one of its windows."""
    reach = [(w.start, w.start + len(w.token_ids) - 2) for w in windows]
    return {s for s in text.spans if any(start <= s[1] and s[2] < end for start, end in reach)}


def test_every_entity_a_window_can_hold_lies_whole_in_one(cluener, model_files):  # noqa: F811
    """Entities across a window's edge were neither trained on nor predictable. On train.json every entity of
    at most a window lies whole in one (a window is centred on each the --stride windows miss); dev and test
    windows do not look at the gold: every entity of at most `window − stride + 1` characters lies in one."""
    tokens = cluener["snippets"].CharacterTokens(model_files / "vocab.txt")
    rng = np.random.default_rng(0)
    for _ in range(300):
        room, length = int(rng.integers(1, 12)), int(rng.integers(1, 40))
        stride = int(rng.integers(1, room + 1))
        text = random_text(rng, cluener, length, room)
        args = types.SimpleNamespace(maxlen=room + 2, stride=stride)
        trained = cluener["windows_of"]([text], tokens, ["name"], args, at_entities=True)
        assert held(trained, text) == {s for s in text.spans if s[2] - s[1] < room}
        predicted = cluener["windows_of"]([text], tokens, ["name"], args)
        assert held(predicted, text) >= {s for s in text.spans if s[2] - s[1] + 1 <= room - stride + 1}
        assert all(len(w.token_ids) <= room + 2 for w in trained + predicted)
        starts = [w.start for w in predicted]  # --stride apart, the last reaching the end
        assert starts == list(range(0, starts[-1] + 1, stride)) and starts[-1] + room >= length
        for window in trained:
            assert window.label == cluener["_window_spans"](text.spans, window.start, len(window.token_ids) - 2, [
                "name"])  # fmt: skip


def test_the_entities_no_window_holds_are_counted_in_the_log(cluener, model_files, capsys):  # noqa: F811
    tokens = cluener["snippets"].CharacterTokens(model_files / "vocab.txt")
    # Windows of 4 every 4: [0, 4), [4, 8), [8, 10); one entity too long, one across an edge, one held.
    text = cluener["Text"](None, "张" * 10, {("name", 0, 4), ("name", 3, 4), ("name", 5, 6)}, 1)
    args = types.SimpleNamespace(maxlen=6, stride=4)
    windows = cluener["windows_of"]([text], tokens, ["name"], args)
    cluener["say_unheld"]([text], windows, "dev.json", args, scored=True)
    assert capsys.readouterr().out == (
        "dev.json: 2 of 3 gold entities lie whole in no window, so cannot be predicted (1 longer than a window's 4 "
        "characters: give a larger --maxlen; 1 across every window's edge: a --stride of 4 holds whole only "
        "entities of up to 1 character, give a lower one); dev F1 counts them as missed.\n"
    )
    windows = cluener["windows_of"]([text], tokens, ["name"], args, at_entities=True)
    cluener["say_unheld"]([text], windows, "train.json", args)
    assert capsys.readouterr().out == (
        "train.json: 1 of 3 gold entities lie whole in no window, so are not trained on (1 longer than a window's "
        "4 characters: give a larger --maxlen).\n"
    )
    cluener["say_unheld"]([cluener["Text"](None, "张" * 10, {("name", 5, 6)}, 1)], windows, "train.json", args)
    assert capsys.readouterr().out == ""


def test_a_run_says_how_many_entities_no_window_holds(model_files, tmp_path, capsys):  # noqa: F811
    """Windows of 3 characters: the fixture's 4-character companies fit none, in train and in dev."""
    counts = {}
    for name in ("train", "dev"):
        spans = [p for r in json_lines(FIXTURES / "cluener" / f"{name}.json") for t in r["label"].values()
                 for places in t.values() for p in places]  # fmt: skip
        counts[name] = (sum(end - start + 1 > 3 for start, end in spans), len(spans))
    result = run("cluener", model_files, tmp_path, None, "--maxlen", "5", "--epochs", "8", "--batch-size", "8",
                 lr="3e-3")  # fmt: skip
    out = capsys.readouterr().out
    for name, (longer, total) in counts.items():
        assert f"{FIXTURES / 'cluener' / name}.json: {longer} of {total} gold entities lie whole in no window" in out
        assert f"({longer} longer than a window's 3 characters: give a larger --maxlen)" in out
    # Every entity a window holds is learnt (seeds 0, 1 and 2 alike); those none holds count as missed: recall
    # (total - longer) / total at precision 1.
    longer, total = counts["dev"]
    recall = (total - longer) / total
    assert 0 < longer and result["dev_f1"] == pytest.approx(2 * recall / (1 + recall))


class Perfect:
    """A model that scores exactly the gold spans of `batches`' windows, batch after batch."""

    def __init__(self, batches):
        self.targets = iter([batches[index][1] for index in range(len(batches))])

    def predict_on_batch(self, inputs):
        return np.where(next(self.targets) > 0, 1.0, -1.0)


def test_dev_f1_counts_the_entities_no_window_holds_as_missed(cluener, model_files):  # noqa: F811
    """Perfect on every window, a model still misses the two entities no window holds: recall 1 of 3."""
    tokens = cluener["snippets"].CharacterTokens(model_files / "vocab.txt")
    text = cluener["Text"](None, "张" * 10, {("name", 0, 4), ("name", 3, 4), ("name", 5, 6)}, 1)
    args = types.SimpleNamespace(maxlen=6, stride=4, batch_size=2, head="globalpointer")
    windows = cluener["windows_of"]([text], tokens, ["name"], args)
    model = Perfect(cluener["SpanBatches"](windows, 2, ["name"], "globalpointer", maxlen=6))
    unlabelled = [dataclasses.replace(window, label=None) for window in windows]
    predicted = cluener["predicted_spans"](model, unlabelled, [text], ["name"], args)
    assert predicted == [{("name", 5, 6)}]
    assert cluener["entity_scores"](predicted, [text]) == (1.0, 1 / 3, 0.5)


def test_every_character_gets_a_token_a_space_too(cluener, model_files, tmp_path):  # noqa: F811
    """Spaces were dropped before tokenizing: `foo bar` read as `foobar`, and an entity starting on a space was
    in no window. A space (any whitespace) is [unused1], untrained in a BERT's vocab as bert4keras has it,
    else [UNK]; token i of a text is its character i."""
    tokens = cluener["snippets"].CharacterTokens(model_files / "vocab.txt")  # no [unused1] in the tiny vocab
    ids = tokens.ids
    assert tokens.encode("张 三\t去") == [ids["张"], ids["[UNK]"], ids["三"], ids["[UNK]"], ids["去"]]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[unused1]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n张\n三\n", "utf-8")
    assert cluener["snippets"].CharacterTokens(vocab).encode(" 张\u3000三x") == [1, 6, 1, 7, 2]
    text = cluener["Text"](None, "ab  c 张三", {("name", 5, 7)}, 1)  # the entity " 张三" starts on a space
    (window,) = cluener["windows_of"]([text], tokens, ["name"], types.SimpleNamespace(maxlen=16, stride=None))
    assert len(window.token_ids) == 2 + len(text.text)
    assert window.label == [(0, 6, 8)]  # tokens 6 to 8 ([CLS] is token 0): characters 5 to 7


def test_entity_scores_and_the_crf_tags_decoded(cluener):
    text = cluener["Text"](None, "abcdef", {("name", 0, 1), ("address", 3, 5)}, 1)
    predicted = [{("name", 0, 1), ("name", 3, 5)}]
    assert cluener["entity_scores"](predicted, [text]) == (0.5, 0.5, 0.5)
    assert cluener["entity_scores"]([set()], [text]) == (0.0, 0.0, 0.0)

    # [CLS] B-0 I-0 O B-1 B-1 I-1 [SEP]: two types, the tags 1 + 2t (first) and 2 + 2t (the others).
    tags = np.array([0, 1, 2, 0, 3, 3, 4, 0])
    assert cluener["_decoded"](tags, 6, "crf") == [(0, 1, 2), (1, 4, 4), (1, 5, 6)]
    scores = np.full((2, 8, 8), -1.0)
    scores[0, 1, 2], scores[1, 5, 6], scores[1, 6, 5], scores[0, 7, 7] = 1.0, 2.0, 3.0, 4.0  # the last two: no span
    assert cluener["_decoded"](scores, 6, "globalpointer") == [(0, 1, 2), (1, 5, 6)]


def test_bio_tags_and_their_decoding_round_trip_every_non_overlapping_span_set(cluener):
    """Many random span sets, with adjacent spans of one type, one-token spans and spans up to the window's
    end: SpanBatches' CRF targets decoded (the path the CRF's Viterbi output takes) give the spans back."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        count, kinds = int(rng.integers(1, 20)), int(rng.integers(1, 5))
        spans, position = [], 1
        while position <= count:
            if rng.random() < 0.4:
                last = min(count, position + int(rng.integers(0, 4)))
                spans.append((int(rng.integers(kinds)), position, last))
                position = last
            position += 1
        window = cluener["Window"]([0] * (count + 2), [0] * (count + 2), spans, 0, 0)
        batches = cluener["SpanBatches"]([window], 1, list(range(kinds)), "crf")
        (_, targets) = batches[0]
        assert cluener["_decoded"](targets[0], count, "crf") == spans


def test_bio_tags_refuse_overlapping_spans_rather_than_overwrite_one(cluener):
    window = cluener["Window"]([0] * 8, [0] * 8, [(0, 1, 4), (1, 3, 3)], 0, 0)
    with pytest.raises(ValueError, match=r"spans \(0, 1, 4\) and \(1, 3, 3\) overlap.*one tag a token"):
        cluener["SpanBatches"]([window], 1, ["a", "b"], "crf")[0]


OVERLAPS = [("train.json", 1, "腾讯公司"), ("dev.json", 2, "阿里公司")]


def with_overlaps(data, *overlaps):
    """`data`, a copy of the fixture, given a name inside a company and an address across its end (characters
    3 to 6) on each `(file, line, company)`."""
    for name, line, company in overlaps:
        records = json_lines(data / name)
        records[line - 1]["label"]["name"][company[:2]] = [[3, 4]]  # inside the company (characters 3 to 6)
        records[line - 1]["label"]["address"] = {"公司工": [[5, 7]]}  # across its end
        (data / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    return data


@pytest.fixture(scope="module")
def pointer_run(model_files, tmp_path_factory):  # noqa: F811
    """The globalpointer head's run on the fixture with every one of `OVERLAPS`, in train.json and dev.json."""
    folder = tmp_path_factory.mktemp("overlaps")
    data = shutil.copytree(FIXTURES / "cluener", folder / "data")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.syspath_prepend(str(CLUE))
        return run("cluener", model_files, folder / "out", with_overlaps(data, *OVERLAPS), "--head", "globalpointer")


@pytest.mark.parametrize("name, line, company", OVERLAPS)
def test_the_crf_refuses_overlapping_gold_spans(name, line, company, model_files, tmp_path, monkeypatch, pointer_run):  # noqa: F811
    """BIO tags hold one span a character: the CRF head's targets lost nested spans and invented others. The
    pointer heads keep them: one globalpointer run learns from both files' overlaps (`pointer_run`)."""
    data = with_overlaps(shutil.copytree(FIXTURES / "cluener", tmp_path / "data"), (name, line, company))
    monkeypatch.setattr(keras.Model, "fit", lambda *a, **k: pytest.fail("trained before the overlap was refused"))
    message = (rf"{name}, line {line}: company '{company}' at \[3, 6\] and name '{company[:2]}' at \[3, 4\] "
               r"overlap: --head crf tags each character once.*--head globalpointer or --head efficient")  # fmt: skip
    with pytest.raises(ValueError, match=message):
        run("cluener", model_files, tmp_path / "out", data, "--head", "crf")
    assert pointer_run["predictions"].exists()


def test_the_pointer_heads_keep_nested_and_overlapping_spans(cluener, model_files):  # noqa: F811
    tokens = cluener["snippets"].CharacterTokens(model_files / "vocab.txt")
    spans = {("company", 3, 6), ("name", 3, 4), ("address", 5, 7), ("name", 3, 6)}  # one span, two types too
    text = cluener["Text"](None, "赵六在腾讯公司工作。", spans, 1)
    kinds = ["address", "company", "name"]
    (window,) = cluener["windows_of"]([text], tokens, kinds, types.SimpleNamespace(maxlen=16, stride=None))
    assert window.label == [(0, 6, 8), (1, 4, 7), (2, 4, 5), (2, 4, 7)]
    for head in ("globalpointer", "efficient"):
        (_, targets) = cluener["SpanBatches"]([window], 1, kinds, head)[0]
        assert sorted(zip(*np.nonzero(targets[0]))) == [(0, 6, 8), (1, 4, 7), (2, 4, 5), (2, 4, 7)]
        assert cluener["_decoded"](np.where(targets[0] > 0, 1.0, -1.0), 10, head) == window.label


BAD = {
    "a span outside its text": ("train.json", 0, lambda r: r["label"]["name"].update({"赵六": [[0, 40]]}),
                                "train.json, line 1: name '赵六' at \\[0, 40\\] lies outside the text"),
    "an entity that is not its text": ("dev.json", 2, lambda r: r["label"].setdefault("name", {}).update({"不对": [[0, 1]]}),
                                       "dev.json, line 3: name '不对' at \\[0, 1\\] is '.*' in the text"),
    "a type dev has and train never": ("dev.json", 0, lambda r: r["label"].update({"movie": {r["text"][:1]: [[0, 0]]}}),
                                       "dev.json, line 1: type 'movie' never appears in .*train.json"),
    "no text": ("test.json", 0, lambda r: r.pop("text"), "test.json, line 1: no text"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_data_is_refused_naming_the_file_and_line(case, model_files, tmp_path):  # noqa: F811
    name, line, change, message = BAD[case]
    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "cluener", data)
    records = json_lines(data / name)
    change(records[line])
    (data / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    with pytest.raises(ValueError, match=message):
        run("cluener", model_files, tmp_path / "out", data)
