#!/usr/bin/env python3
"""Compare a tok-train SentencePiece model with spm_train's of the same settings.

usage: spm_train_pieces.py OURS.model SPM.model MODE HELD_OUT.txt MAX_RATIO

MODE: ws-only (allow_whitespace_only_pieces, tok-train's default), split (spm_train's
default) or no-split (split_by_whitespace=false, whitespace-only pieces allowed).
Checks, written from SentencePiece's documented rule for U+2581 in a piece (not from
lmpipe's code): with split_by_whitespace it may only be the first character, unless the
piece is all U+2581 and whitespace-only pieces are allowed; without it, it may not be the
last character of a longer piece (same exception). spm's own pieces must pass the rule
too (a check of the rule as written here). Then: whitespace-only pieces in ours exactly
when spm has them; ours encode HELD_OUT into at most MAX_RATIO times spm's token count.
"""
import sys

import sentencepiece as spm

WS = "\u2581"


def valid(piece, split, allow_ws_only):
    if allow_ws_only and all(c == WS for c in piece):
        return True
    for pos, c in enumerate(piece):
        if c != WS or pos == 0:
            continue
        if split or pos == len(piece) - 1:
            return False
    return True


def pieces(m):
    return [m.id_to_piece(i) for i in range(m.get_piece_size())
            if not (m.is_byte(i) or m.is_control(i) or m.is_unknown(i) or m.is_unused(i))]


def main():
    ours_path, spm_path, mode, held_path, max_ratio = sys.argv[1:6]
    split = mode != "no-split"
    allow = mode != "split"
    ours, theirs = spm.SentencePieceProcessor(model_file=ours_path), spm.SentencePieceProcessor(model_file=spm_path)
    ok = True
    for who, m in (("ours", ours), ("spm_train's", theirs)):
        bad = [p for p in pieces(m) if not valid(p, split, allow)]
        if bad:
            print(f"FAIL {who}: {len(bad)} pieces break the rule for {WS} in mode {mode}: {bad[:8]}")
            ok = False
    ws_ours = {p for p in pieces(ours) if len(p) > 1 and all(c == WS for c in p)}
    ws_spm = {p for p in pieces(theirs) if len(p) > 1 and all(c == WS for c in p)}
    if bool(ws_ours) != bool(ws_spm):
        print(f"FAIL whitespace-only pieces: ours {sorted(ws_ours)[:6]}, spm_train's {sorted(ws_spm)[:6]}")
        ok = False
    inner = lambda m: sum(1 for p in pieces(m) if WS in p[1:] and not all(c == WS for c in p))
    if (inner(ours) > 0) != (inner(theirs) > 0):
        print(f"FAIL pieces across words: ours {inner(ours)}, spm_train's {inner(theirs)}")
        ok = False
    lines = open(held_path, encoding="utf-8", errors="replace").read().split("\n")
    n_ours = sum(len(x) for x in ours.encode(lines))
    n_spm = sum(len(x) for x in theirs.encode(lines))
    a, b = set(pieces(ours)), set(pieces(theirs))
    ratio = n_ours / max(n_spm, 1)
    summary = (f"{mode}: {len(ws_ours)} and {len(ws_spm)} whitespace-only pieces, {inner(ours)} and "
               f"{inner(theirs)} across words; pieces shared {len(a & b) / len(a | b):.3f}; tokens on held-out "
               f"text {n_ours} against {n_spm} ({ratio:.4f}, at most {max_ratio})")
    if ratio > float(max_ratio):
        print("FAIL " + summary)
        ok = False
    print(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
