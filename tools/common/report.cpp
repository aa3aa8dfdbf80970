#include "common/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "lmpipe/core/json.h"

namespace lmp::cli {

std::string num(double v, int precision) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{:.{}g}", v, precision);
}

std::string Table::text() const {
  std::vector<std::size_t> w(cols_.size());
  auto width = [](const std::string& s) {  // display columns: UTF-8 continuation bytes take none
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  for (std::size_t c = 0; c < cols_.size(); ++c) {
    w[c] = width(cols_[c].title);
    for (const auto& r : rows_) w[c] = std::max(w[c], width(r[c]));
  }
  std::string out;
  auto line = [&](auto cell) {
    std::string l;
    for (std::size_t c = 0; c < cols_.size(); ++c) {
      const std::string s = cell(c);
      const std::string pad(w[c] - width(s), ' ');
      if (c) l += "  ";
      l += cols_[c].number ? pad + s : s + (c + 1 < cols_.size() ? pad : "");
    }
    out += l + "\n";
  };
  line([&](std::size_t c) { return cols_[c].title; });
  line([&](std::size_t c) { return std::string(w[c], '-'); });
  for (const auto& r : rows_) line([&](std::size_t c) { return r[c]; });
  return out;
}

std::string Table::csv() const {
  auto quote = [](const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  std::string out;
  for (std::size_t c = 0; c < cols_.size(); ++c) out += (c ? "," : "") + cols_[c].key;
  out += "\n";
  for (const auto& r : rows_) {
    for (std::size_t c = 0; c < cols_.size(); ++c) out += (c ? "," : "") + quote(r[c]);
    out += "\n";
  }
  return out;
}

void Table::append_json(std::string& out) const {
  out += "[";
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    out += i ? ",{" : "{";
    for (std::size_t c = 0; c < cols_.size(); ++c) {
      if (c) out += ",";
      json::append_string(out, cols_[c].key);
      out += ":";
      const std::string& v = rows_[i][c];
      if (!cols_[c].number) {
        json::append_string(out, v);
      } else if (v == "nan" || v == "inf" || v == "-inf" || v.empty() || v == "-") {
        out += "null";
      } else {
        out += v;
      }
    }
    out += "}";
  }
  out += "]";
}

void Report::field(const std::string& key, double v) {
  const std::string s = num(v, 6);
  fields.emplace_back(key, s == "nan" || s == "inf" || s == "-inf" ? "null" : s);
}

void Report::field(const std::string& key, const std::string& s) {
  std::string q;
  json::append_string(q, s);
  fields.emplace_back(key, q);
}

std::string Report::render(ReportFormat f) const {
  std::string out;
  if (f == ReportFormat::json) {
    out = "{";
    json::append_string(out, "mode");
    out += ":";
    json::append_string(out, mode);
    for (const auto& [k, v] : fields) {
      out += ",";
      json::append_string(out, k);
      out += ":" + v;
    }
    for (const auto& t : tables) {
      out += ",";
      json::append_string(out, t.name());
      out += ":";
      t.append_json(out);
    }
    return out + "}\n";
  }
  if (f == ReportFormat::csv) {
    for (std::size_t i = 0; i < tables.size(); ++i) {
      if (tables.size() > 1) out += (i ? "\n# " : "# ") + tables[i].name() + "\n";
      out += tables[i].csv();
    }
    return out;
  }
  for (const auto& l : head) out += l + "\n";
  for (const auto& t : tables)
    if (t.in_text) out += (out.empty() ? "" : "\n") + t.text();
  if (!foot.empty()) out += "\n";
  for (const auto& l : foot) out += l + "\n";
  return out;
}

namespace {

// Round tick steps: 1, 2 or 5 times a power of ten, about `n` ticks over [lo, hi].
std::vector<double> ticks(double lo, double hi, int n) {
  std::vector<double> t;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / n, p = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / p < 1.5 ? p : raw / p < 3.5 ? 2 * p : raw / p < 7.5 ? 5 * p : 10 * p;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return o;
}

}  // namespace

std::string svg_chart(const std::vector<Panel>& panels) {
  const double W = 760, H = 340, ml = 80, mr = 190, mt = 36, mb = 50;
  static const char* colors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H * static_cast<double>(panels.size()));
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const Panel& pn = panels[p];
    const double oy = H * static_cast<double>(p), pw = W - ml - mr, ph = H - mt - mb;
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    for (const auto& se : pn.series)
      for (auto [x, y] : se.points) {
        if (pn.log_y && !(y > 0)) continue;
        x0 = std::min(x0, x), x1 = std::max(x1, x);
        const double yy = pn.log_y ? std::log10(y) : y;
        y0 = std::min(y0, yy), y1 = std::max(y1, yy);
      }
    if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    if (!pn.log_y) y0 = std::min(y0, 0.0);
    if (pn.log_y) y0 = std::floor(y0), y1 = std::ceil(y1);
    if (y1 <= y0) y1 = y0 + 1;
    if (x1 <= x0) x1 = x0 + 1;
    auto X = [&](double x) { return ml + (x - x0) / (x1 - x0) * pw; };
    auto Y = [&](double y) { return oy + mt + ph - ((pn.log_y ? std::log10(y) : y) - y0) / (y1 - y0) * ph; };
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", ml, oy + 22, esc(pn.title));
    s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"none\" stroke=\"#333\"/>\n", ml,
                     oy + mt, pw, ph);
    for (double t : ticks(x0, x1, 8))
      s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                       X(t), oy + mt, oy + mt + ph, oy + mt + ph + 16, num(t, 4));
    if (pn.log_y) {
      for (double e = y0; e <= y1 + 1e-9; e += 1)
        s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
                         "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                         ml, Y(std::pow(10.0, e)), ml + pw, ml - 6, Y(std::pow(10.0, e)) + 4, num(std::pow(10.0, e), 3));
    } else {
      for (double t : ticks(y0, y1, 6))
        s += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
                         "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                         ml, Y(t), ml + pw, ml - 6, Y(t) + 4, num(t, 4));
    }
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n", ml + pw / 2, oy + H - 12, esc(pn.x_label));
    s += fmt::format("<text transform=\"translate({:.0f},{:.0f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n", 18.0,
                     oy + mt + ph / 2, esc(pn.y_label));
    for (std::size_t i = 0; i < pn.series.size(); ++i) {
      const auto& se = pn.series[i];
      const char* col = colors[i % 8];
      std::string pts;
      for (auto [x, y] : se.points)
        if (!pn.log_y || y > 0) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" points=\"{}\"/>\n", col, pts);
      if (se.points.size() <= 16)
        for (auto [x, y] : se.points)
          if (!pn.log_y || y > 0) s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(x), Y(y), col);
      const double ly = oy + mt + 14 + 18 * static_cast<double>(i);
      s += fmt::format("<line x1=\"{0:.0f}\" y1=\"{1:.0f}\" x2=\"{2:.0f}\" y2=\"{1:.0f}\" stroke=\"{3}\" stroke-width=\"3\"/>"
                       "<text x=\"{4:.0f}\" y=\"{5:.0f}\">{6}</text>\n",
                       ml + pw + 12, ly, ml + pw + 34, col, ml + pw + 40, ly + 4, esc(se.label));
    }
  }
  return s + "</svg>\n";
}

}  // namespace lmp::cli
