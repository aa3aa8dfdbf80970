"""Compare `tok-encode --nbest N` with SentencePiece's own n best (its Python binding's
NBestEncodeAsIds, spm_encode --output_format=nbest_id) for each line of a UTF-8 text.

Each segmentation is scored as the lattice scores it: the sum of its pieces' scores, a
character spelled by byte-fallback pieces counting as one unknown piece (the lowest
normal score minus 10). Per line the check wants the same number of segmentations, the
same scores rank by rank, our scores never increasing, every segmentation spelling the
line, and the same segmentations but for those tied at the last score (which of several
equal paths makes the cut is the implementation's choice, and so is the order of equal
scores). An unknown piece (no byte fallback) counts one unknown piece per character.

usage: python3 spm_nbest.py MODEL TEXT N LMPIPE_IDS
"""
import sys

import sentencepiece as spm

TOL = 1e-3  # spm sums float scores; lmpipe sums doubles


def main():
    if len(sys.argv) != 5:
        print("usage: python3 spm_nbest.py MODEL TEXT N LMPIPE_IDS", file=sys.stderr)
        return 2
    sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
    n = int(sys.argv[3])
    with open(sys.argv[2], encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    with open(sys.argv[4], encoding="utf-8") as f:
        ours_rows = [tuple(int(x) for x in row.split()) for row in f.read().split("\n")]
    if ours_rows and ours_rows[-1] == () and len(ours_rows) > 1:
        ours_rows.pop()

    size = sp.GetPieceSize()
    normal = [sp.GetScore(i) for i in range(size)
              if not (sp.IsUnknown(i) or sp.IsControl(i) or sp.IsByte(i) or sp.IsUnused(i))]
    unk_score = min(normal) - 10.0
    byte_value = {i: int(sp.IdToPiece(i)[3:5], 16) for i in range(size) if sp.IsByte(i)}

    def score(ids, norm):
        """The lattice score of a segmentation of the normalized text `norm`; an unknown
        piece stands for a run of characters without a piece of their own, as many as
        come before the next piece's text (None when that does not spell `norm`)."""
        total = 0.0
        pos = 0
        for k, i in enumerate(ids):
            if sp.IsUnknown(i):
                nxt = sp.IdToPiece(ids[k + 1]) if k + 1 < len(ids) else None
                run = 0
                while pos < len(norm) and (run == 0 or not (nxt and norm.startswith(nxt, pos))):
                    if sp.PieceToId(norm[pos]) != sp.unk_id() and run:
                        break
                    pos += 1
                    run += 1
                total += run * unk_score
            elif i in byte_value:
                if byte_value[i] & 0xC0 != 0x80:  # a byte that starts a character
                    total += unk_score
                    pos += 1
            else:
                piece = sp.IdToPiece(i)
                if not norm.startswith(piece, pos):
                    return None
                pos += len(piece)
                total += sp.GetScore(i)
        return total if pos == len(norm) else None

    at = 0
    exact = ties = unscored = bad = 0
    for k, line in enumerate(lines):
        theirs = [tuple(x) for x in sp.NBestEncodeAsIds(line, n)]
        ours = ours_rows[at:at + len(theirs)]
        at += len(theirs)
        problem = None
        if len(ours) != len(theirs):
            problem = f"{len(ours)} segmentations, spm {len(theirs)}"
        elif ours == theirs:
            exact += 1
            continue
        else:
            spelled = sp.DecodeIds(list(theirs[0]))
            wrong = [x for x in ours if sp.DecodeIds(list(x)) != spelled]
            norm = "".join(sp.EncodeAsPieces(line))  # (unknown pieces as their text)
            so = [score(x, norm) for x in ours]
            st = [score(x, norm) for x in theirs]
            if wrong:
                problem = f"a segmentation spells {sp.DecodeIds(list(wrong[0]))!r}, not {spelled!r}"
            elif len(set(ours)) != len(ours):
                problem = "a segmentation twice"
            elif None in so or None in st:
                unscored += 1
                problem = "a segmentation that does not spell the normalized text"
            elif any(so[r + 1] > so[r] + TOL for r in range(len(so) - 1)):
                problem = f"scores not best first: {so}"
            elif any(abs(a - b) > TOL for a, b in zip(sorted(so), sorted(st))):
                problem = f"scores differ: ours {so[:5]}…, spm {st[:5]}…"
            else:
                last = min(st)
                by_score = dict(zip(ours, so))
                by_score.update(zip(theirs, st))
                off = (set(ours) ^ set(theirs))
                if any(abs(by_score[x] - last) > TOL for x in off):
                    problem = "other segmentations than spm's, not at a tie"
                else:
                    ties += 1
                    continue
        bad += 1
        if bad <= 3:
            print(f"  line {k + 1}: {problem}")
    if at != len(ours_rows):
        print(f"  {len(ours_rows)} rows of ids, spm's lists make {at}")
        bad += 1
    print(f"{len(lines)} lines: {exact} identical, {ties} equal up to the order or choice of equal scores, "
          f"{bad} wrong" + (f" ({unscored} not scored)" if unscored else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
