"""Compare `tok-encode --offsets` rows with SentencePiece's own surface offsets (its
Python binding's begin/end, in characters) for each line of a UTF-8 text: the same ids,
and the same spans once lmpipe's byte spans are widened to whole characters.

usage: python3 spm_offsets.py MODEL TEXT LMPIPE_ROWS
"""
import bisect
import sys

import sentencepiece as spm


def main():
    if len(sys.argv) != 4:
        print("usage: python3 spm_offsets.py MODEL TEXT LMPIPE_ROWS", file=sys.stderr)
        return 2
    sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    rows = {}
    with open(sys.argv[3], "rb") as f:
        for row in f.read().split(b"\n"):
            if not row:
                continue
            fields = row.split(b"\t")
            rows.setdefault(int(fields[0]), []).append((int(fields[1]), int(fields[2]), int(fields[3])))
    tokens = bad = 0
    for i, raw in enumerate(lines):
        line = raw.decode("utf-8")
        starts = []  # byte offset of each character, then the line's length
        b = 0
        for ch in line:
            starts.append(b)
            b += len(ch.encode("utf-8"))
        starts.append(b)
        pieces = sp.encode(line, out_type="immutable_proto").pieces
        ours = rows.get(i + 1, [])
        tokens += len(pieces)

        def problem(what):
            nonlocal bad
            bad += 1
            if bad <= 5:
                print(f"line {i + 1}: {what}")

        if len(ours) != len(pieces):
            problem(f"{len(ours)} tokens, spm {len(pieces)}")
            continue
        for k, (p, (ob, oe, oid)) in enumerate(zip(pieces, ours)):
            if oid != p.id:
                problem(f"token {k}: id {oid}, spm {p.id}")
                break
            cb = bisect.bisect_right(starts, ob) - 1
            ce = bisect.bisect_right(starts, oe - 1) if oe > ob else cb
            if (cb, ce) != (p.begin, p.end):
                problem(f"token {k} (id {oid} {p.piece!r}): bytes [{ob}, {oe}) = characters [{cb}, {ce}), "
                        f"spm [{p.begin}, {p.end}): {line[:80]!r}")
                break
    print(f"{tokens} tokens on {len(lines)} lines, {bad} lines differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
