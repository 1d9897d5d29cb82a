#!/usr/bin/env python3
"""Text classes for the tokenizer benchmark, built from files a Debian 12 system carries
(nothing is downloaded), about 1 MB each, written once to a cache directory outside the
repository:

- english: the licence texts of /usr/share/common-licenses, then the English manual
  pages (/usr/share/man/man1, troff requests dropped) up to the size;
- code: C headers of /usr/include and Python modules of /usr/lib/python3.11, alternately,
  file by file in name order;
- multilingual: the translated manual pages of /usr/share/man/LANG (German, French,
  Spanish, Italian, Portuguese, Dutch, Swedish, Polish, Turkish, Russian, Japanese,
  Korean), troff requests dropped, an equal share each.

Files are taken in sorted order, so a machine with the same packages builds the same
texts; the benchmark checks every tokenizer's ids against tiktoken's on whatever it
built, so another machine's texts are still compared fairly. Lines of 8 characters or
more seen before are left out, as in the family corpora (their without_repeats()): a
manual page repeats its option texts and a header its licence, which caches reuse and
tiktoken encodes again (17-20% of the bytes were such lines).
usage: tok_corpora.py [--dir DIR]  (prints the paths)
"""
import argparse
import glob
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "unit", "tokenizer"))
from family_corpora import without_repeats  # noqa: E402

SIZE = 1 << 20
LANGS = ["de", "fr", "es", "it", "pt", "nl", "sv", "pl", "tr", "ru", "ja", "ko"]


def default_dir():
    cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    # -2: the texts without repeated lines (tok-corpora held them with).
    return os.path.join(cache, "shmfeed", "tok-corpora-2")


def read_text(path):
    """The file as text (gunzipped), or '' when it is not UTF-8."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return ""


def man_text(path):
    """A manual page's text lines: troff requests and comments dropped."""
    lines = [ln for ln in read_text(path).splitlines()
             if not ln.startswith((".", "'", '\\"'))]
    return "\n".join(lines) + "\n" if lines else ""


def fill(sources, size):
    """Concatenate texts from the iterables in turn (round robin) up to `size` bytes."""
    out, total = [], 0
    iters = [without_repeats(s) for s in sources]
    while iters and total < size:
        for it in list(iters):
            text = next(it, None)
            if text is None:
                iters.remove(it)
                continue
            out.append(text)
            total += len(text.encode("utf-8"))
            if total >= size:
                break
    data = "".join(out).encode("utf-8")[:size]
    # Cut at a character boundary so the text stays valid UTF-8.
    return data.decode("utf-8", errors="ignore")


def english():
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path) and not os.path.islink(path):
            yield read_text(path)
    for path in sorted(glob.glob("/usr/share/man/man1/*.gz")):
        yield man_text(path)


def files_text(pattern):
    for path in sorted(glob.glob(pattern, recursive=True)):
        if os.path.isfile(path):
            text = read_text(path)
            if text:
                yield text


def build(directory):
    os.makedirs(directory, exist_ok=True)
    classes = {
        "english": lambda: fill([english()], SIZE),
        "code": lambda: fill([files_text("/usr/include/*.h"),
                              files_text("/usr/lib/python3.11/**/*.py")], SIZE),
        "multilingual": lambda: fill(
            [(man_text(p) for p in sorted(glob.glob(f"/usr/share/man/{lang}/man*/*.gz")))
             for lang in LANGS], SIZE),
    }
    paths = {}
    for name, make in classes.items():
        path = os.path.join(directory, name + ".txt")
        if not os.path.exists(path):
            text = make()
            if len(text.encode("utf-8")) < SIZE // 2:
                raise RuntimeError(f"too little text for the {name} class on this system")
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        paths[name] = path
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=default_dir())
    args = ap.parse_args()
    for name, path in build(args.dir).items():
        print(name, path)


if __name__ == "__main__":
    main()
