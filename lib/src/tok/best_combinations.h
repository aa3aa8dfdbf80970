// The n best combinations of a sequence of parts, one alternative from each, by the sum
// of the alternatives' scores: how a text's n best segmentations are made from its
// words' n best (SentencePieceModel::nbest_paths, Tokenizer::nbest). Internal to the
// library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace lmp::tok {

class BestCombinations {
 public:
  // Start over with no parts (one empty combination, score 0), keeping the n best.
  void reset(std::size_t n) {
    n_ = n;
    scores_.assign(1, 0.0);
    parts_.clear();
    back_.clear();
  }
  // One more part: its alternatives' scores, best first (at least one). Candidates come
  // off a heap: (i, j + 1) after (i, j), and (i + 1, 0) after (i, 0), so that each pair of
  // combination i and alternative j is seen once and never before a better one. Equal
  // sums: the lower combination, then the lower alternative, first.
  void add(const double* part, std::size_t count) {
    if (count == 1) {  // changes no ranks
      for (double& x : scores_) x += part[0];
      parts_.push_back({kSingle});
      return;
    }
    parts_.push_back({static_cast<std::uint32_t>(back_.size())});
    // With n combinations already, the n pairs (i, 0) score at least `floor`: nothing
    // below it can be among the n best.
    const double floor = scores_.size() >= n_ ? scores_[n_ - 1] + part[0] : -std::numeric_limits<double>::infinity();
    heap_.assign(1, {scores_[0] + part[0], 0, 0});
    next_.clear();
    while (next_.size() < n_ && !heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), worse);
      const Cand c = heap_.back();
      heap_.pop_back();
      next_.push_back(c.score);
      back_.emplace_back(c.i, c.j);
      if (c.j + 1 < count && scores_[c.i] + part[c.j + 1] >= floor) push({scores_[c.i] + part[c.j + 1], c.i, c.j + 1});
      if (c.j == 0 && c.i + 1 < scores_.size()) push({scores_[c.i + 1] + part[0], c.i + 1, 0});
    }
    scores_.swap(next_);
  }
  // The combinations' scores, best first.
  const std::vector<double>& scores() const { return scores_; }
  // Combination r's alternative of each part, in the order the parts were added.
  void choices(std::size_t r, std::vector<std::uint32_t>& alt) const {
    alt.resize(parts_.size());
    auto rank = static_cast<std::uint32_t>(r);
    for (std::size_t p = parts_.size(); p-- > 0;) {
      if (parts_[p].back == kSingle) {
        alt[p] = 0;
        continue;
      }
      const auto& b = back_[parts_[p].back + rank];
      alt[p] = b.second;
      rank = b.first;
    }
  }

 private:
  struct Cand {
    double score;
    std::uint32_t i, j;
  };
  static bool worse(const Cand& a, const Cand& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.i != b.i ? a.i > b.i : a.j > b.j;
  }
  void push(const Cand& c) {
    heap_.push_back(c);
    std::push_heap(heap_.begin(), heap_.end(), worse);
  }
  static constexpr std::uint32_t kSingle = 0xFFFFFFFFu;
  struct Part {
    std::uint32_t back;  // where its (combination, alternative) pairs start in back_, or kSingle
  };
  std::size_t n_ = 1;
  std::vector<double> scores_{0.0}, next_;
  std::vector<Part> parts_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> back_;  // per part: one per combination after it
  std::vector<Cand> heap_;
};

}  // namespace lmp::tok
