// The plain pair-count BPE learner of the conformance tests that have HF tokenizers build
// and save a tokenizer (any merge list makes a valid model, so the learner need not be
// HF's). Each round merges the most frequent adjacent pair of symbols that are both in
// `vocab` (ties: the smaller pair text) in every word; the merged token is the left
// symbol followed by the right one without its first `prefixLen` characters (HF's
// continuing_subword_prefix) and is added to `vocab` (token → id) when new.
// words: [[symbol, ...], count] pairs, rewritten in place. Returns the merges as [a, b].
function learnMerges(words, vocab, rounds, prefixLen = 0) {
  const add = (t) => { if (!(t in vocab)) vocab[t] = Object.keys(vocab).length; };
  const merges = [];
  for (let r = 0; r < rounds; ++r) {
    const pairs = new Map();
    for (const [w, n] of words)
      for (let i = 0; i + 1 < w.length; ++i) {
        if (!(w[i] in vocab) || !(w[i + 1] in vocab)) continue;
        const p = w[i] + "\u0001" + w[i + 1];
        pairs.set(p, (pairs.get(p) || 0) + n);
      }
    let best = null, bestN = 1;
    for (const [p, n] of pairs) if (n > bestN || (n === bestN && best !== null && p < best)) { best = p; bestN = n; }
    if (best === null) break;
    const [a, b] = best.split("\u0001");
    const merged = a + b.slice(prefixLen);
    merges.push([a, b]);
    add(merged);
    for (const entry of words) {
      const w = entry[0], o = [];
      for (let i = 0; i < w.length; ++i)
        if (i + 1 < w.length && w[i] === a && w[i + 1] === b) { o.push(merged); ++i; } else o.push(w[i]);
      entry[0] = o;
    }
  }
  return merges;
}

module.exports = { learnMerges };
