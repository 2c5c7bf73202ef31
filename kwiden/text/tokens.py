"""A corpus (text files and folders, `.txt` or `.gz`) tokenized once into a
memory-mapped token file in the run's folder, and read back on a second run:
nanoGPT's `prepare.py`, with whole-word marks for Chinese masking."""

import codecs
import contextlib
import gzip
import hashlib
import json
import pathlib
import zlib

import numpy as np

from kwiden.files import file_digest, replaced_atomically

SUFFIXES = (".txt", ".gz")
FOLDER = "tokens"
CHUNK_BYTES = 1 << 24
LINES_PER_BATCH = 4096


def corpus_files(paths, run_folder=None):
    """The text files under `paths` (files, or folders searched for .txt and
    .gz files, sorted, leaving out hidden ones, `.tar.gz` archives and the
    run's own folder), each once; a missing path or a folder without text is
    refused, naming it."""
    if isinstance(paths, (str, pathlib.Path)):
        paths = [paths]
    own = None if run_folder is None else pathlib.Path(run_folder).resolve()

    def searched(folder, path):
        hidden = any(part.startswith(".") for part in path.relative_to(folder).parts)
        inside_run = own is not None and own in path.resolve().parents
        return path.is_file() and path.suffix in SUFFIXES and not path.name.endswith(".tar.gz") and not (
            hidden or inside_run)  # fmt: skip

    files = []
    for path in map(pathlib.Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if searched(path, p))
            if not found:
                raise ValueError(f"The corpus folder {path} holds no .txt or .gz file.")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise ValueError(
                f"The corpus file {path} is not a regular file (a pipe or a device): kwiden reads the corpus "
                "more than once (to check it, to tokenize it, and again on a resume); save it to a file and give that."
            )
        else:
            raise ValueError(f"The corpus file {path} does not exist; give text files (.txt, .gz) or folders.")
    if not files:
        raise ValueError("No corpus given: name text files (.txt, .gz) or folders holding them.")
    return list({file.resolve(): file for file in files}.values())  # a file named twice is read once


def lines_of(path):
    """The lines of one UTF-8 file (gzip-compressed where it ends in .gz),
    read in chunks; bytes that are not UTF-8 are refused with the file's name
    and their byte offset (in the decompressed text)."""
    path = pathlib.Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, rest = 0, ""
    try:
        with opener(path, "rb") as file:
            for chunk in iter(lambda: file.read(CHUNK_BYTES), b""):
                text = _decoded(decoder, chunk, path, offset)
                offset += len(chunk)
                lines = (rest + text).split("\n")
                rest = lines.pop()
                yield from lines
            rest += _decoded(decoder, b"", path, offset, final=True)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise ValueError(f"The corpus file {path} is not a readable gzip file ({error}).") from None
    if rest:
        yield rest


def _decoded(decoder, chunk, path, offset, final=False):
    pending = len(decoder.getstate()[0])  # bytes of a character split across chunks
    try:
        return decoder.decode(chunk, final)
    except UnicodeDecodeError as error:
        raise ValueError(
            f"The corpus file {path} is not UTF-8 text: byte offset {offset - pending + error.start} "
            f"({error.reason}). Convert it to UTF-8 (e.g. iconv -f GB18030 -t UTF-8)."
        ) from None


class TokenFile:
    """The corpus as one stream of token ids (`ids`, a read-only memmap), and
    where whole-word masking may start a word (`word_starts`, or None)."""

    def __init__(self, folder):
        self.folder = pathlib.Path(folder)
        self.index = json.loads((self.folder / "index.json").read_text("utf-8"))
        count = self.index["count"]
        self.ids = np.memmap(self.folder / "ids.bin", self.index["dtype"], "r", shape=(count,))
        words = self.folder / "word_starts.bin"
        self.word_starts = np.memmap(words, np.uint8, "r", shape=(count,)) if words.exists() else None

    def __len__(self):
        return len(self.ids)

    @property
    def digest(self):
        """The SHA-256 of the token stream: equal for equal tokens, whatever the files' times."""
        return self.index.get("digest") or hashlib.sha256(memoryview(self.ids)).hexdigest()  # an older index


def tokenized(paths, tokenizer, run_folder, whole_words=False, verbose=True):
    """The corpus `paths` as a `TokenFile` under `run_folder/tokens/`, made
    once: a second call with the same files (paths, sizes, contents),
    tokenizer and word marks reads the file made before."""
    files = corpus_files(paths, run_folder)
    folder = pathlib.Path(run_folder) / FOLDER
    key = _key(files, tokenizer, whole_words)
    index = folder / "index.json"
    if _made_with(index) == key:
        return TokenFile(folder)
    if folder.is_symlink():
        raise ValueError(f"{folder} is a link; kwiden keeps the token file in a folder of its own: remove the link.")
    folder.mkdir(parents=True, exist_ok=True)
    index.unlink(missing_ok=True)  # the index is written last: without it the token files are unfinished
    (folder / "word_starts.bin").unlink(missing_ok=True)
    dtype = np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32
    count, text_seen, digest = 0, [False], hashlib.sha256()
    with contextlib.ExitStack() as stack:
        ids_out = _written_beside(stack, folder / "ids.bin")
        words_out = _written_beside(stack, folder / "word_starts.bin") if whole_words else None
        for ids, starts in _token_batches(files, tokenizer, whole_words, verbose, text_seen):
            stored = ids.astype(dtype).tobytes()
            ids_out.write(stored)
            digest.update(stored)
            if words_out is not None:
                words_out.write(starts.astype(np.uint8).tobytes())
            count += len(ids)
        if count == 0 or not text_seen[0]:
            raise ValueError(f"The corpus ({', '.join(map(str, files[:3]))}{' …' * (len(files) > 3)}) holds no text.")
    with replaced_atomically(index) as temporary:
        temporary.write_text(
            json.dumps(dict(key=key, count=count, dtype=np.dtype(dtype).name, digest=digest.hexdigest()), indent=1),
            "utf-8",
        )
    return TokenFile(folder)


def _made_with(index):
    """The key the token file was made with, or None where there is none to read (unfinished, or damaged:
    the tokens are then made again)."""
    try:
        return json.loads(index.read_text("utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        return None


def _written_beside(stack, path):
    """A binary file open on a temporary beside `path`, closed and renamed to it when `stack` closes without
    error (removed if it fails): a link planted at `path` is replaced, never written through."""
    return stack.enter_context(open(stack.enter_context(replaced_atomically(path)), "wb"))


def _key(files, tokenizer, whole_words):
    """What the token file depends on: the files' paths, sizes and contents (their SHA-256: a file edited
    in place keeping its size and time, as `touch -r`, `rsync -t` or `tar` leave it, is read again), the
    tokenizer, the word marks."""
    stats = [[str(f.resolve()), f.stat().st_size, file_digest(f)] for f in files]
    vocabulary = tokenizer.tokenizer.to_str() if tokenizer.kind != "bytes" else "bytes"
    digest = hashlib.sha256(vocabulary.encode("utf-8")).hexdigest()
    return dict(files=stats, tokenizer=digest, whole_words=bool(whole_words))


def _token_batches(files, tokenizer, whole_words, verbose, text_seen):
    from tqdm.auto import tqdm

    segment = segmenter() if whole_words else None
    keep_blank = tokenizer.kind == "bytes"  # bytes are the text as it is; other tokenizers drop blank lines
    with tqdm(files, desc="tokenizing", unit="file", disable=not verbose or len(files) < 2) as progress:
        for path in progress:
            batch = []
            for line in lines_of(path):
                if line.strip():
                    text_seen[0] = True
                elif not keep_blank:
                    continue
                batch.append(line)
                if len(batch) == LINES_PER_BATCH:
                    yield _encoded(batch, tokenizer, segment)
                    batch = []
            if batch:
                yield _encoded(batch, tokenizer, segment)


def _encoded(lines, tokenizer, segment):
    """The ids of `lines`, each followed by the tokenizer's separator (for
    bytes: the newline byte), and where words start."""
    if tokenizer.kind == "bytes":
        lines = [line + "\n" for line in lines]
    ids, offsets = tokenizer.encode_lines(lines)
    ending = [] if tokenizer.separator is None else [tokenizer.separator]
    all_ids = np.concatenate([np.concatenate([line_ids, ending]) for line_ids in ids]).astype(np.int64)
    if segment is None:
        return all_ids, None
    offsets = offsets or [None] * len(lines)
    starts = [np.concatenate([word_starts(line, o, segment), [True] * len(ending)]) for line, o in zip(lines, offsets)]
    return all_ids, np.concatenate(starts)


def word_starts(line, offsets, segment):
    """Which tokens of `line` start a word (jieba's words; a piece of a word,
    or a later byte of a character, does not)."""
    boundary = np.zeros(len(line) + 1, bool)
    position = 0
    for word in segment(line):
        boundary[position] = True
        position += len(word)
    if offsets is None:  # bytes: each byte's character
        sizes = [len(c.encode("utf-8")) for c in line]
        starts_at = np.repeat(np.arange(len(line)), sizes)
    else:
        starts_at = np.asarray([start for start, _ in offsets], np.int64).reshape(-1)
    first = np.ones(len(starts_at), bool)
    first[1:] = starts_at[1:] != starts_at[:-1]
    return boundary[starts_at] & first


def segmenter(flag="--whole-word-mask"):
    """A function cutting a line into words (jieba's; other scripts at their spaces and punctuation), for `flag`'s
    whole-word masking."""
    try:
        import jieba
    except ImportError:
        raise ValueError(f"{flag} finds Chinese words with jieba, which is not installed: pip install jieba") from None
    jieba.setLogLevel(60)  # its dictionary-loading notices
    return lambda line: jieba.cut(line, HMM=True)
