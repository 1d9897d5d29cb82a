"""Text corpora built from what a Debian system carries, for the tokenizer tests and
benchmarks (nothing is downloaded): English prose (the license texts and the packages'
copyright files and READMEs), source code (the Python standard library), and
multilingual text (the translated manual pages: Japanese, Korean, Chinese, Russian,
Ukrainian and the European languages). Each function returns a list of documents (str),
read in sorted path order and capped in total size, so that a run is reproducible on one
machine; files that are not valid UTF-8 are skipped."""
import glob
import gzip
import os

PROSE_GLOBS = ["/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
               "/usr/share/doc/*/README*"]
CODE_GLOBS = ["/usr/lib/python3.11/*.py", "/usr/lib/python3.11/*/*.py"]
MAN_LANGS = ["ja", "ko", "zh_CN", "zh_TW", "ru", "uk", "de", "fr", "es", "pl", "cs", "tr",
             "pt_BR", "it", "hu", "sv", "nl", "ro", "sr", "fi"]


def _read(path, limit):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(limit)
        else:
            with open(path, "rb") as f:
                data = f.read(limit)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def _collect(paths, max_bytes, doc_bytes):
    docs, total = [], 0
    for path in paths:
        if total >= max_bytes:
            break
        if not os.path.isfile(path):
            continue
        text = _read(path, doc_bytes)
        if text:
            docs.append(text)
            total += len(text.encode("utf-8"))
    return docs


def prose(max_bytes=2_000_000, doc_bytes=65536):
    paths = sorted(p for g in PROSE_GLOBS for p in glob.glob(g))
    return _collect(paths, max_bytes, doc_bytes)


def code(max_bytes=2_000_000, doc_bytes=65536):
    paths = sorted(p for g in CODE_GLOBS for p in glob.glob(g))
    return _collect(paths, max_bytes, doc_bytes)


def multilingual(max_bytes=2_000_000, doc_bytes=32768):
    """Manual pages in each language in turn, so that a capped corpus has all of them."""
    per_lang = {lang: sorted(glob.glob("/usr/share/man/%s/man*/*.gz" % lang))
                for lang in MAN_LANGS}
    paths, i = [], 0
    while any(i < len(v) for v in per_lang.values()):
        for lang in MAN_LANGS:
            if i < len(per_lang[lang]):
                paths.append(per_lang[lang][i])
        i += 1
    return _collect(paths, max_bytes, doc_bytes)


if __name__ == "__main__":
    for name, fn in [("prose", prose), ("code", code), ("multilingual", multilingual)]:
        docs = fn()
        print(name, len(docs), "documents", sum(len(d.encode()) for d in docs), "bytes")
