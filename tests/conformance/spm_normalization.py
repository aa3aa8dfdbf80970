"""SentencePiece normalization of two models of one rule, compared character by character.

Usage: spm_normalization.py OURS.model SPM.model RULE

What each model's normalizer makes of every code point (between two letters) and of every
short canonical sequence that composes (a letter and its accent, and the variants with a
character that decomposes to one of its parts alone), read as spm itself applies the model:
decode(encode(text)), both models with byte fallback so that nothing becomes <unk>.
The two must agree, except where spm_train's map leaves a character alone that a newer
Unicode maps: spm's tables are Unicode 13, lmpipe's come from the system's ICU. Each such
character must then be newer than Unicode 3.2 (Python's old database: no character of
1.1 to 3.2, such as the full-width tilde that nmt_nfkc keeps, is excused), be mapped the
same way as ours by this Python's Unicode database (14 on Debian 12) or be unknown to it
(added later), and there may be at most 200 of them.
"""
import sys
import unicodedata

import sentencepiece as spm

ours_path, spm_path, rule = sys.argv[1:4]
ours = spm.SentencePieceProcessor(model_file=ours_path)
theirs = spm.SentencePieceProcessor(model_file=spm_path)
case_fold = rule.endswith("_cf")


def simple_fold(ch):
    # Python has full case folding only; where it gives one character it is the simple one.
    f = ch.casefold()
    return f if len(f) == 1 else ch


def expected(s):  # the rule by this Python's Unicode database (no nmt rules: not needed here)
    n = unicodedata.normalize("NFKC", s)
    return "".join(simple_fold(c) for c in n) if case_fold else n


texts = []
for cp in range(1, 0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    texts.append(chr(cp))
singles = {}
for cp in range(0xA0, 0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    d = unicodedata.normalize("NFD", chr(cp))
    if len(d) == 1 and d != chr(cp):
        singles.setdefault(d, []).append(chr(cp))
sequences = 0
for cp in range(0xA0, 0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    d = unicodedata.normalize("NFD", chr(cp))
    if len(d) < 2 or len(d.encode()) >= 6:
        continue
    variants = [""]
    for part in d:
        variants = [v + c for v in variants for c in [part] + singles.get(part, [])]
    for v in variants:
        if len(v.encode()) < 6:
            texts.append(v)
            sequences += 1


def normalized(sp, batch):
    return sp.decode(sp.encode(batch))


fail = 0
newer = 0
step = 20000
for i in range(0, len(texts), step):
    batch = ["a" + t + "b" for t in texts[i:i + step]]
    got_ours = normalized(ours, batch)
    got_spm = normalized(theirs, batch)
    for t, a, b in zip(texts[i:i + step], got_ours, got_spm):
        if a == b:
            continue
        wrapped = "a" + t + "b"
        known = all(unicodedata.category(c) != "Cn" for c in t)
        old = any(unicodedata.ucd_3_2_0.category(c) != "Cn" for c in t)
        if b == wrapped and not old and (not known or a == "a" + expected(t) + "b"):
            newer += 1
            continue
        fail += 1
        if fail <= 20:
            print("  differ on", " ".join(f"U+{ord(c):04X}" for c in t), ": ours", ascii(a), "spm", ascii(b))
if newer > 200:
    print(f"  {newer} characters that only ours maps (more than 200 newer than spm's Unicode 13?)")
    fail += 1
print(f"{rule}: {len(texts) - sequences} characters and {sequences} composing sequences, "
      f"{fail} differences, {newer} characters newer than spm's tables")
sys.exit(1 if fail else 0)
