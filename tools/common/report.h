// Reports of the measuring tools: named tables printed aligned for people, or as JSON or
// CSV for scripts, and line charts written as SVG.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lmp::cli {

enum class ReportFormat { text, json, csv };

struct Column {
  std::string key;    // the JSON and CSV field name (stable, documented)
  std::string title;  // the text header
  bool number = true; // right-aligned in text, unquoted in JSON
};

class Table {
 public:
  Table(std::string name, std::vector<Column> cols) : name_(std::move(name)), cols_(std::move(cols)) {}
  // One row, a cell per column; numbers already formatted as JSON numbers ("nan" and
  // "inf" become null in JSON).
  void add(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  const std::string& name() const { return name_; }
  std::string text() const;
  std::string csv() const;
  void append_json(std::string& out) const;  // [{"key": value, ...}, ...]
  bool in_text = true;  // false: JSON and CSV only (long curves)

 private:
  std::string name_;
  std::vector<Column> cols_;
  std::vector<std::vector<std::string>> rows_;
};

struct Report {
  std::string mode;
  // Scalar results: key and JSON literal (a number, true/false, or a JSON string).
  std::vector<std::pair<std::string, std::string>> fields;
  std::vector<std::string> head;  // text lines before the tables
  std::vector<Table> tables;
  std::vector<std::string> foot;  // text lines after the tables (the arithmetic, notes)
  void field(const std::string& key, double v);
  void field(const std::string& key, const std::string& s);  // a string
  std::string render(ReportFormat f) const;
};

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y)
};
struct Panel {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool log_y = false;
};
// Panels stacked vertically in one SVG document: axes with ticks, one polyline and a
// legend entry per series.
std::string svg_chart(const std::vector<Panel>& panels);

// "%.4g"-style number for tables, and JSON-safe.
std::string num(double v, int precision = 4);

}  // namespace lmp::cli
