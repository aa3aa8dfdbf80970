// DoubleArray: a byte trie in the double-array layout (Aoe), for prefix searches that
// step one byte at a time with two array reads: child = base[node] + byte, valid when
// check[child] == node. Built once from a set of keys, then read-only.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace lmp {

class DoubleArray {
 public:
  // `keys` are (bytes, value >= 0); keys must be distinct and non-empty.
  void build(std::vector<std::pair<std::string_view, std::int32_t>> keys);

  // Walk from `node` (0 = root) by byte c: the child, or -1.
  std::int32_t step(std::int32_t node, unsigned char c) const {
    auto t = static_cast<std::size_t>(nodes_[static_cast<std::size_t>(node)].base) + c;
    return t < nodes_.size() && nodes_[t].check == node ? static_cast<std::int32_t>(t) : -1;
  }
  // The value of the key that ends at `node`, or -1.
  std::int32_t value(std::int32_t node) const { return nodes_[static_cast<std::size_t>(node)].value; }
  std::size_t size() const { return nodes_.size(); }

 private:
  // A node's three fields side by side: a step reads one cache line, not three.
  struct Node {
    std::int32_t base = 0, check = -1, value = -1;
  };
  std::vector<Node> nodes_;
};

}  // namespace lmp
