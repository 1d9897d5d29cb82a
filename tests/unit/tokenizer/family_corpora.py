"""Text corpora built from what a Debian system carries (nothing is downloaded), shared by
the tokenizer family reference test and the tokenizer benchmark:

- prose: the licence texts of /usr/share/common-licenses, then the packages'
  /usr/share/doc/*/copyright files (English);
- code: the Python standard library sources of /usr/lib/python3.*;
- multilingual: the translated messages (msgstr) of the gettext catalogues under
  /usr/share/locale, an equal share for each of many languages and scripts;
- random_strings: random Unicode strings that stress the pre-tokenizer patterns.

Each corpus is cut to a byte budget and built in a fixed order, so one system gives the
same text on every run. A line of 8 characters or more (spaces aside) that came before is
left out (without_repeats()): the copyright files copy whole licence paragraphs, so half
of the prose's bytes were lines seen earlier, which an encoder's caches reuse and a
reference without caches encodes again (a review found the prose ratios measuring that).
"""
import glob
import os
import random
import struct
import unicodedata

LANGUAGES = ["de", "fr", "es", "ru", "uk", "el", "ja", "zh_CN", "zh_TW", "ko", "ar", "he",
             "hi", "th", "vi", "tr", "ka", "pl", "cs", "fi", "bg", "sr", "ta", "bn", "fa"]


REPEAT_MIN = 8


def without_repeats(parts):
    """The texts of `parts` less each line of REPEAT_MIN characters or more (spaces aside)
    that an earlier line of any of them had."""
    seen = set()
    for part in parts:
        kept = []
        for line in part.split("\n"):
            key = line.strip()
            if len(key) >= REPEAT_MIN:
                if key in seen:
                    continue
                seen.add(key)
            kept.append(line)
        yield "\n".join(kept)


def _cut(parts, budget):
    out, size = [], 0
    for part in without_repeats(parts):
        if size >= budget:
            break
        out.append(part)
        size += len(part.encode())
    text = "".join(out)
    data = text.encode()[:budget]
    return data.decode("utf-8", errors="ignore")


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def prose(budget=1 << 20):
    paths = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
    paths += sorted(glob.glob("/usr/share/doc/*/copyright"))
    return _cut(filter(None, map(_read, paths)), budget)


def code(budget=1 << 20):
    dirs = sorted(glob.glob("/usr/lib/python3.[0-9]*"))
    paths = sorted(glob.glob(os.path.join(dirs[0], "*.py"))) if dirs else []
    return _cut(filter(None, map(_read, paths)), budget)


def _mo_strings(path):
    """The translated strings of a gettext .mo file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412de else ">" if magic == 0xde120495 else None
    if not order:
        return []
    n, _, trans = struct.unpack(order + "III", data[8:20])
    out = []
    for i in range(n):
        length, off = struct.unpack(order + "II", data[trans + 8 * i:trans + 8 * i + 8])
        try:
            s = data[off:off + length].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if i and s:  # entry 0 is the catalogue header
            out.append(s.replace("\x00", "\n") + "\n")
    return out


def multilingual(budget=1 << 20):
    share = budget // len(LANGUAGES)
    parts = []
    for lang in LANGUAGES:
        strings = []
        for path in sorted(glob.glob("/usr/share/locale/%s/LC_MESSAGES/*.mo" % lang)):
            strings.extend(_mo_strings(path))
        parts.append(_cut(strings, share))
    return "".join(parts)


# Characters that exercise every alternative of the patterns: case, contractions,
# marks, spaces of all kinds, digits of several scripts, CJK, emoji and joiners, and
# U+2581, the space of SentencePiece models.
POOL = ("abZQsStrevmlLdD'''   \t\n\n\r\v\f07!//.-\u2581"
        "\u00a0\u0085\u1680\u2003\u3000\u017f\u212a\u00c0\u00e9\u01c5\u02b0\u05d0\u4e00"
        "\uac00\u0300\u0301\u20dd\u0903\u0663\u00bd\u2160\U0001f44d\U0001f600\u200d\ufe0f"
        "\U00010400\U00010428\u00aa\u03a3\u03c2\u1e9e\u00df\u2028")


def _random_char(rng):
    if rng.randrange(8) == 0:
        cp = rng.randrange(0x3400) if rng.randrange(4) else rng.randrange(0x110000)
        # Assigned in this Python's Unicode (an unassigned one may be a letter in the
        # newer tables of the tokenizers), and not a surrogate.
        if not 0xd800 <= cp <= 0xdfff and unicodedata.category(chr(cp)) != "Cn":
            return chr(cp)
    return POOL[rng.randrange(len(POOL))]


def random_strings(count, seed, max_chars=64):
    rng = random.Random(seed)
    return ["".join(_random_char(rng) for _ in range(1 + rng.randrange(max_chars)))
            for _ in range(count)]
