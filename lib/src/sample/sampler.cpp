#include "lmpipe/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace lmp::sample {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool before(const Candidate& a, const Candidate& b) {  // higher logit first, then lower id
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

float max_logit(const Candidates& c) {
  float m = kNegInf;
  for (const auto& x : c.items) m = std::max(m, x.logit);
  return m;
}

// Keep the first `n` items in `before` order (sorted afterwards).
void keep_top(Candidates& c, std::size_t n) {
  n = std::min(n, c.items.size());
  if (!c.sorted) std::partial_sort(c.items.begin(), c.items.begin() + static_cast<std::ptrdiff_t>(n), c.items.end(), before);
  c.items.resize(n);
  c.sorted = true;
  c.dense = false;
}
}  // namespace

// ---- candidates ------------------------------------------------------------------------

Status Candidates::load(const float* logits, std::size_t n) {
  items.resize(n);
  n_vocab = n;
  std::size_t w = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float l = logits[i];
    if (std::isnan(l) || l == std::numeric_limits<float>::infinity())
      return make_error(Errc::invalid_argument, "logit of token {} is {}", i, std::isnan(l) ? "NaN" : "+inf");
    items[w] = Candidate{static_cast<TokenId>(i), l};
    w += l != kNegInf;  // -inf: masked
  }
  if (w == 0) return make_error(Errc::invalid_argument, "every logit of the row is -inf: all {} tokens are masked", n);
  items.resize(w);
  dense = w == n;
  sorted = false;
  has_mass = false;
  return {};
}

void Candidates::probabilities(std::vector<float>& p) const {
  p.resize(items.size());
  float m = max_logit(*this);
  double z = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    p[i] = std::exp(items[i].logit - m);
    z += static_cast<double>(p[i]);
  }
  auto inv = static_cast<float>(1.0 / z);
  for (float& x : p) x *= inv;
}

void Candidates::sort() {
  if (!sorted) std::sort(items.begin(), items.end(), before);
  sorted = true;
  dense = false;
}

std::size_t argmax(const Candidates& c) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < c.items.size(); ++i) {
    const auto& x = c.items[i];
    const auto& b = c.items[best];
    if (x.logit > b.logit || (x.logit == b.logit && x.id < b.id)) best = i;
  }
  return best;
}

double entropy(const Candidates& c) {
  std::vector<float> p;
  c.probabilities(p);
  double h = 0;
  for (float x : p)
    if (x > 0) h -= static_cast<double>(x) * std::log(static_cast<double>(x));
  return h;
}

// ---- stages ----------------------------------------------------------------------------

namespace {

class Penalties final : public Sampler {
 public:
  Penalties(float repeat, float freq, float presence, int last_n)
      : repeat_(repeat), freq_(freq), presence_(presence), last_n_(static_cast<std::size_t>(std::max(last_n, 0))) {}
  std::string_view name() const override { return "penalties"; }
  void accept(TokenId id) override {
    if (last_n_ == 0) return;
    history_.push_back(id);
    if (history_.size() > last_n_) history_.pop_front();
  }
  void reset() override { history_.clear(); }
  void apply(Candidates& c) override {
    if (history_.empty()) return;
    counts_.clear();
    for (TokenId id : history_) {
      auto it = std::find_if(counts_.begin(), counts_.end(), [&](const auto& p) { return p.first == id; });
      if (it == counts_.end()) counts_.emplace_back(id, 1);
      else ++it->second;
    }
    auto penalize = [&](Candidate& x, int count) {
      // A positive logit is divided, a negative one multiplied, so the penalty always lowers it.
      if (repeat_ != 1.0f) x.logit = x.logit <= 0 ? x.logit * repeat_ : x.logit / repeat_;
      x.logit -= static_cast<float>(count) * freq_ + (count > 0 ? presence_ : 0.0f);
    };
    if (c.dense) {
      for (const auto& [id, n] : counts_)
        if (id >= 0 && static_cast<std::size_t>(id) < c.items.size()) penalize(c.items[static_cast<std::size_t>(id)], n);
    } else {
      for (auto& x : c.items)
        for (const auto& [id, n] : counts_)
          if (x.id == id) penalize(x, n);
    }
    c.sorted = false;
  }

 private:
  float repeat_, freq_, presence_;
  std::size_t last_n_;
  std::deque<TokenId> history_;
  std::vector<std::pair<TokenId, int>> counts_;
};

class Temperature final : public Sampler {
 public:
  explicit Temperature(float t) : t_(t) {}
  std::string_view name() const override { return "temperature"; }
  void apply(Candidates& c) override {
    if (t_ <= 0) {  // greedy: the first maximum only
      Candidate best = c.items[argmax(c)];
      c.items.assign(1, best);
      c.sorted = true;
      c.dense = false;
      return;
    }
    const float inv = 1.0f / t_;
    for (auto& x : c.items) x.logit *= inv;
  }

 private:
  float t_;
};

class TopK final : public Sampler {
 public:
  TopK(int k, Ties ties, std::size_t min_keep) : k_(static_cast<std::size_t>(k)), ties_(ties), min_keep_(min_keep) {}
  std::string_view name() const override { return "top-k"; }
  void apply(Candidates& c) override {
    const std::size_t k = std::max(k_, min_keep_);
    if (k >= c.items.size()) return;
    if (c.sorted) {
      std::size_t n = k;
      if (ties_ == Ties::keep)
        while (n < c.items.size() && c.items[n].logit == c.items[k - 1].logit) ++n;
      c.items.resize(n);
      return;
    }
    // The k best by (logit, id): a partial sort for small k (one pass against a heap of
    // k), a selection for large k; never a full sort of the row.
    if (k <= 256) {
      std::partial_sort(c.items.begin(), c.items.begin() + static_cast<std::ptrdiff_t>(k), c.items.end(), before);
    } else {
      std::nth_element(c.items.begin(), c.items.begin() + static_cast<std::ptrdiff_t>(k - 1), c.items.end(), before);
      std::sort(c.items.begin(), c.items.begin() + static_cast<std::ptrdiff_t>(k), before);
    }
    std::size_t n = k;
    if (ties_ == Ties::keep) {  // every candidate equal to the k-th is kept (HF)
      const float t = c.items[k - 1].logit;
      for (std::size_t i = k; i < c.items.size(); ++i)
        if (c.items[i].logit == t) std::swap(c.items[i], c.items[n++]);
      std::sort(c.items.begin() + static_cast<std::ptrdiff_t>(k), c.items.begin() + static_cast<std::ptrdiff_t>(n), before);
    }
    c.items.resize(n);
    c.sorted = true;
    c.dense = false;
  }

 private:
  std::size_t k_;
  Ties ties_;
  std::size_t min_keep_;
};

// The smallest set of the most probable candidates whose mass reaches p (the crossing
// candidate kept), at least min_keep. Without sorting the row: the probabilities are
// bucketed by logit (4096 buckets between the maximum and the minimum) in the one pass that
// computes the normalizer, the buckets are walked from the top until the mass reaches p,
// and only the candidates of the crossing bucket are sorted.
class TopP final : public Sampler {
 public:
  TopP(float p, std::size_t min_keep) : p_(p), min_keep_(min_keep) {}
  std::string_view name() const override { return "top-p"; }
  void apply(Candidates& c) override {
    if (p_ <= 0) return keep_top(c, std::max<std::size_t>(1, min_keep_));
    if (c.items.size() <= std::max<std::size_t>(1, min_keep_)) return;
    float hi = kNegInf, lo = std::numeric_limits<float>::infinity();
    for (const auto& x : c.items) {
      hi = std::max(hi, x.logit);
      lo = std::min(lo, x.logit);
    }
    if (c.sorted) return sorted_walk(c, hi);
    constexpr int kBuckets = 4096;
    const float span = hi - lo;
    const float scale = span > 0 ? (kBuckets - 1) / span : 0.0f;
    mass_.assign(kBuckets, 0.0);
    count_.assign(kBuckets, 0);
    double z = 0;
    for (const auto& x : c.items) {
      float e = std::exp(x.logit - hi);
      auto b = static_cast<int>((hi - x.logit) * scale);
      mass_[static_cast<std::size_t>(b)] += static_cast<double>(e);
      ++count_[static_cast<std::size_t>(b)];
      z += static_cast<double>(e);
    }
    const double target = static_cast<double>(p_) * z;
    double cum = 0;
    std::size_t n = 0;
    int bb = 0;
    for (; bb < kBuckets; ++bb) {
      if (cum + mass_[static_cast<std::size_t>(bb)] >= target && n + count_[static_cast<std::size_t>(bb)] >= min_keep_) break;
      cum += mass_[static_cast<std::size_t>(bb)];
      n += count_[static_cast<std::size_t>(bb)];
    }
    // Candidates above the crossing bucket are kept; the crossing bucket's are sorted and
    // taken until the mass reaches p (and at least min_keep are kept).
    std::size_t w = 0;
    edge_.clear();
    for (const auto& x : c.items) {  // branch-free keep: survivors come in random order
      auto b = static_cast<int>((hi - x.logit) * scale);
      c.items[w] = x;
      w += static_cast<std::size_t>(b < bb);
      if (b == bb) edge_.push_back(x);  // rare: predictable
    }
    std::sort(edge_.begin(), edge_.end(), before);
    for (const auto& x : edge_) {
      if (cum >= target && w >= min_keep_) break;
      c.items[w++] = x;
      cum += static_cast<double>(std::exp(x.logit - hi));
    }
    c.items.resize(w);
    c.dense = false;
    c.sorted = false;
    c.has_mass = true;
    c.mass_ref = hi;
    c.mass = cum;
  }

 private:
  void sorted_walk(Candidates& c, float hi) {
    double z = 0;
    for (const auto& x : c.items) z += static_cast<double>(std::exp(x.logit - hi));
    const double target = static_cast<double>(p_) * z;
    double cum = 0;
    std::size_t n = 0;
    while (n < c.items.size() && (cum < target || n < min_keep_)) cum += static_cast<double>(std::exp(c.items[n++].logit - hi));
    c.items.resize(n);
    c.has_mass = true;
    c.mass_ref = hi;
    c.mass = cum;
  }
  float p_;
  std::size_t min_keep_;
  std::vector<double> mass_;
  std::vector<std::size_t> count_;
  std::vector<Candidate> edge_;
};

// Candidates with probability >= p × the top probability: logit >= max + ln p, decided in
// logit space (no softmax).
class MinP final : public Sampler {
 public:
  MinP(float p, std::size_t min_keep) : p_(p), min_keep_(min_keep) {}
  std::string_view name() const override { return "min-p"; }
  void apply(Candidates& c) override {
    const float t = max_logit(c) + std::log(p_);
    std::size_t kept = 0;
    for (const auto& x : c.items) kept += x.logit >= t;
    if (kept < min_keep_) return keep_top(c, min_keep_);
    std::size_t w = 0;
    for (const auto& x : c.items) {  // branch-free
      c.items[w] = x;
      w += static_cast<std::size_t>(x.logit >= t);
    }
    if (w < c.items.size()) c.dense = false;
    c.items.resize(w);
  }

 private:
  float p_;
  std::size_t min_keep_;
};

// Locally typical sampling (Meister et al.): candidates ranked by |−log p − H|, kept until
// their mass exceeds p (the crossing one kept), at least min_keep.
class Typical final : public Sampler {
 public:
  Typical(float p, std::size_t min_keep) : p_(p), min_keep_(min_keep) {}
  std::string_view name() const override { return "typical"; }
  void apply(Candidates& c) override {
    std::vector<float> p;
    c.probabilities(p);
    double h = 0;
    for (float x : p)
      if (x > 0) h -= static_cast<double>(x) * std::log(static_cast<double>(x));
    std::vector<std::size_t> order(c.items.size());
    std::vector<double> dev(c.items.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      order[i] = i;
      dev[i] = std::fabs(-std::log(static_cast<double>(p[i])) - h);
    }
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return dev[a] != dev[b] ? dev[a] < dev[b] : c.items[a].id < c.items[b].id;
    });
    double cum = 0;
    std::size_t n = 0;
    while (n < order.size() && (cum <= static_cast<double>(p_) || n < min_keep_)) cum += static_cast<double>(p[order[n++]]);
    std::vector<Candidate> kept;
    kept.reserve(n);
    for (std::size_t i = 0; i < n; ++i) kept.push_back(c.items[order[i]]);
    c.items = std::move(kept);
    c.sorted = false;
    c.dense = false;
  }

 private:
  float p_;
  std::size_t min_keep_;
};

std::vector<std::string> split_order(const std::string& order) {
  if (order == "hf") return {"penalties", "temperature", "top-k", "top-p", "min-p", "typical"};
  if (order == "llama") return {"penalties", "top-k", "typical", "top-p", "min-p", "temperature"};
  std::vector<std::string> v;
  std::stringstream ss(order);
  for (std::string s; std::getline(ss, s, ',');) v.push_back(s);
  return v;
}

}  // namespace

Result<Chain> Chain::make(const Config& cfg) {
  if (!(cfg.temperature >= 0)) return make_error(Errc::invalid_argument, "temperature must be >= 0, got {}", cfg.temperature);
  if (!(cfg.top_p >= 0)) return make_error(Errc::invalid_argument, "top-p must be >= 0, got {}", cfg.top_p);
  if (!(cfg.min_p >= 0 && cfg.min_p <= 1)) return make_error(Errc::invalid_argument, "min-p must be in [0, 1], got {}", cfg.min_p);
  if (!(cfg.typical > 0)) return make_error(Errc::invalid_argument, "typical must be > 0, got {}", cfg.typical);
  if (!(cfg.repeat_penalty > 0)) return make_error(Errc::invalid_argument, "repeat penalty must be > 0, got {}", cfg.repeat_penalty);
  Chain ch;
  const Ties ties = cfg.ties ? *cfg.ties : (cfg.order == "llama" ? Ties::cut : Ties::keep);
  std::vector<std::string> seen;
  for (const std::string& s : split_order(cfg.order)) {
    if (std::find(seen.begin(), seen.end(), s) != seen.end())
      return make_error(Errc::invalid_argument, "stage '{}' appears twice in the order '{}'", s, cfg.order);
    seen.push_back(s);
    if (s == "penalties") {
      if (cfg.repeat_penalty != 1.0f || cfg.frequency_penalty != 0.0f || cfg.presence_penalty != 0.0f)
        ch.stages_.push_back(std::make_unique<Penalties>(cfg.repeat_penalty, cfg.frequency_penalty, cfg.presence_penalty,
                                                         cfg.penalty_last_n));
    } else if (s == "temperature") {
      if (cfg.temperature != 1.0f) ch.stages_.push_back(std::make_unique<Temperature>(cfg.temperature));
    } else if (s == "top-k") {
      if (cfg.top_k > 0) ch.stages_.push_back(std::make_unique<TopK>(cfg.top_k, ties, cfg.min_keep));
    } else if (s == "top-p") {
      if (cfg.top_p < 1.0f) ch.stages_.push_back(std::make_unique<TopP>(cfg.top_p, cfg.min_keep));
    } else if (s == "min-p") {
      if (cfg.min_p > 0.0f) ch.stages_.push_back(std::make_unique<MinP>(cfg.min_p, cfg.min_keep));
    } else if (s == "typical") {
      if (cfg.typical < 1.0f) ch.stages_.push_back(std::make_unique<Typical>(cfg.typical, cfg.min_keep));
    } else {
      return make_error(Errc::invalid_argument,
                        "unknown stage '{}' in the order '{}' (hf, llama, or a list of penalties, temperature, top-k, "
                        "top-p, min-p, typical)",
                        s, cfg.order);
    }
  }
  if (cfg.temperature == 0.0f && std::find(seen.begin(), seen.end(), "temperature") == seen.end())
    return make_error(Errc::invalid_argument, "temperature 0 needs 'temperature' in the order");
  ch.greedy_ = cfg.temperature == 0.0f;
  return ch;
}

void Chain::apply(Candidates& c, const std::function<void(std::string_view, const Candidates&)>& trace) {
  for (auto& s : stages_) {
    c.has_mass = false;  // only the stage that sets it, if it is the last, is trusted
    s->apply(c);
    if (trace) trace(s->name(), c);
  }
}

TokenId Chain::draw(const Candidates& c, Rng& rng) {
  if (greedy_ || c.items.size() == 1) return c.items[argmax(c)].id;
  // The normalizer, unless the last stage left it; then one walk of the CDF that stops at
  // the chosen candidate (exp is computed only that far).
  float m;
  double z;
  if (c.has_mass) {
    m = c.mass_ref;
    z = c.mass;
  } else {
    m = max_logit(c);
    z = 0;
    for (const auto& x : c.items) z += static_cast<double>(std::exp(x.logit - m));
  }
  const double u = rng.uniform() * z;
  double cum = 0;
  for (const auto& x : c.items) {
    cum += static_cast<double>(std::exp(x.logit - m));
    if (u < cum) return x.id;
  }
  return c.items.back().id;  // u within rounding of z
}

TokenId Chain::sample(Candidates& c, Rng& rng) {
  apply(c);
  TokenId id = draw(c, rng);
  accept(id);
  return id;
}

void Chain::accept(TokenId id) {
  for (auto& s : stages_) s->accept(id);
}

void Chain::reset() {
  for (auto& s : stages_) s->reset();
}

std::string Chain::describe() const {
  std::string o;
  for (const auto& s : stages_) o += (o.empty() ? "" : " -> ") + std::string(s->name());
  o += (o.empty() ? "" : " -> ") + std::string(greedy_ ? "greedy" : "draw");
  return o;
}

double chi_square_p(double x, double dof) {
  // Q(a, y) by the series of P for y < a + 1, else by Lentz's continued fraction.
  const double a = dof / 2, y = x / 2;
  if (x <= 0) return 1.0;
  const double lg = std::lgamma(a);
  if (y < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 10000; ++n) {
      term *= y / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-y + a * std::log(y) - lg);
  }
  double b = y + 1 - a, cc = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    cc = b + an / cc;
    if (std::fabs(cc) < 1e-300) cc = 1e-300;
    d = 1 / d;
    double delta = d * cc;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(-y + a * std::log(y) - lg) * h;
}

}  // namespace lmp::sample
