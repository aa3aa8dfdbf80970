#include "lmpipe/text/unicode.h"

#include <algorithm>

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uscript.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <memory>
#include <mutex>
#include <vector>

namespace lmp::text {

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    auto c = decode_utf8(p, s.size(), i);
    if (c.cp >= kInvalidBase) return false;
    i += c.len;
  }
  return true;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp >= kInvalidBase) {
    out += static_cast<char>(cp - kInvalidBase);
  } else if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::size_t count_chars(std::string_view s) {
  std::size_t n = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size(); ++n) i += decode_utf8(p, s.size(), i).len;
  return n;
}

namespace {

std::uint16_t compute_class(std::uint32_t cp) {
  auto c = static_cast<UChar32>(cp);
  std::uint16_t k = 0;
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_TITLECASE_LETTER: k |= kLetter | kUpper; break;
    case U_LOWERCASE_LETTER: k |= kLetter | kLower; break;
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: k |= kLetter | kOtherLetter; break;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK: k |= kMark; break;
    case U_DECIMAL_DIGIT_NUMBER: k |= kNumber | kDigit; break;
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: k |= kNumber; break;
    case U_CONNECTOR_PUNCTUATION: k |= kConnector | kPunct; break;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION: k |= kPunct; break;
    default: break;
  }
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED: k |= kOther; break;
    case U_NON_SPACING_MARK: k |= kNonspacing; break;
    default: break;
  }
  if (u_hasBinaryProperty(c, UCHAR_CHANGES_WHEN_LOWERCASED)) k |= kLowerChanges;
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) k |= kSpace;
  if (cp == '\r' || cp == '\n') k |= kCR_LF;
  UErrorCode st = U_ZERO_ERROR;
  if (uscript_getScript(c, &st) == USCRIPT_HAN && U_SUCCESS(st)) k |= kHan;
  return k;
}

const std::vector<std::uint16_t>& bmp_table() {
  static std::vector<std::uint16_t> table;
  static std::once_flag once;
  std::call_once(once, [] {
    table.resize(0x10000);
    for (std::uint32_t cp = 0; cp < 0x10000; ++cp) table[cp] = compute_class(cp);
  });
  return table;
}

}  // namespace

std::uint16_t char_class(std::uint32_t cp) {
  static const std::vector<std::uint16_t>& t = bmp_table();
  if (cp < 0x10000) return t[cp];
  if (cp >= kInvalidBase) return 0;
  return compute_class(cp);
}

namespace {

const UNormalizer2* instance(NormalForm f) {
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (f) {
    case NormalForm::nfc: n = unorm2_getNFCInstance(&st); break;
    case NormalForm::nfkc: n = unorm2_getNFKCInstance(&st); break;
    case NormalForm::nfd: n = unorm2_getNFDInstance(&st); break;
    case NormalForm::nfkd: n = unorm2_getNFKDInstance(&st); break;
    case NormalForm::nfkc_cf: n = unorm2_getNFKCCasefoldInstance(&st); break;
  }
  LMP_ASSERT(U_SUCCESS(st) && n != nullptr);
  return n;
}

void normalize_valid(std::string& out, std::string_view s, const UNormalizer2* n) {
  if (s.empty()) return;
  UErrorCode st = U_ZERO_ERROR;
  std::vector<UChar> u16(s.size() + 1);
  int32_t len = 0;
  u_strFromUTF8(u16.data(), static_cast<int32_t>(u16.size()), &len, s.data(),
                static_cast<int32_t>(s.size()), &st);
  LMP_ASSERT(U_SUCCESS(st));
  int32_t span = unorm2_spanQuickCheckYes(n, u16.data(), len, &st);
  if (U_SUCCESS(st) && span == len) {
    out.append(s);
    return;
  }
  st = U_ZERO_ERROR;
  std::vector<UChar> norm(static_cast<std::size_t>(len) * 4 + 16);
  int32_t nlen = unorm2_normalize(n, u16.data(), len, norm.data(),
                                  static_cast<int32_t>(norm.size()), &st);
  if (st == U_BUFFER_OVERFLOW_ERROR) {
    norm.resize(static_cast<std::size_t>(nlen));
    st = U_ZERO_ERROR;
    nlen = unorm2_normalize(n, u16.data(), len, norm.data(), nlen, &st);
  }
  LMP_ASSERT(U_SUCCESS(st));
  std::string u8(static_cast<std::size_t>(nlen) * 3 + 4, '\0');
  int32_t u8len = 0;
  st = U_ZERO_ERROR;
  u_strToUTF8(u8.data(), static_cast<int32_t>(u8.size()), &u8len, norm.data(), nlen, &st);
  LMP_ASSERT(U_SUCCESS(st));
  out.append(u8.data(), static_cast<std::size_t>(u8len));
}

}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii && form != NormalForm::nfkc_cf) return std::string(s);  // ASCII is NFC/NFD/NFKC/NFKD already
  const UNormalizer2* n = instance(form);
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t run = 0, i = 0;
  while (i < s.size()) {
    auto c = decode_utf8(p, s.size(), i);
    if (c.cp >= kInvalidBase) {
      normalize_valid(out, s.substr(run, i - run), n);
      out += s[i];
      run = i + 1;
    }
    i += c.len;
  }
  normalize_valid(out, s.substr(run), n);
  return out;
}

}  // namespace lmp::text

namespace lmp::text {

void append_lower(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  if (cp >= kInvalidBase || !(char_class(cp) & kLowerChanges)) {
    append_utf8(out, cp);
    return;
  }
  UChar src[2];
  int32_t n = 0;
  U16_APPEND_UNSAFE(src, n, static_cast<UChar32>(cp));
  UChar dst[8];
  UErrorCode st = U_ZERO_ERROR;
  int32_t len = u_strToLower(dst, 8, src, n, "", &st);
  if (U_FAILURE(st) || len > 8) {
    append_utf8(out, cp);
    return;
  }
  for (int32_t i = 0; i < len;) {
    UChar32 c;
    U16_NEXT(dst, i, len, c);
    append_utf8(out, static_cast<std::uint32_t>(c));
  }
}

bool is_cjk_ideograph(std::uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void bert_normalize(std::string_view s, const BertNormalization& o, std::string& out) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  // 1. Clean and pad ideographs.
  std::string a;
  std::string& step1 = (o.strip_accents || o.lowercase) ? a : out;
  step1.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    auto c = decode_utf8(p, s.size(), i);
    i += c.len;
    std::uint32_t cp = c.cp;
    if (o.clean_text) {
      if (cp >= kInvalidBase || cp == 0 || cp == 0xFFFD) continue;
      if (cp == '\t' || cp == '\n' || cp == '\r') {
        cp = ' ';
      } else {
        std::uint16_t k = char_class(cp);
        if (k & kOther) continue;
        if (k & kSpace) cp = ' ';
      }
    }
    if (o.chinese_chars && is_cjk_ideograph(cp)) {
      step1 += ' ';
      append_utf8(step1, cp);
      step1 += ' ';
    } else {
      append_utf8(step1, cp);
    }
  }
  if (!o.strip_accents && !o.lowercase) return;
  // 2. Strip accents: NFD, then drop nonspacing marks.
  std::string d;
  std::string_view cur = a;
  if (o.strip_accents) {
    std::string nfd = normalize(a, NormalForm::nfd);
    d.reserve(nfd.size());
    const auto* q = reinterpret_cast<const unsigned char*>(nfd.data());
    for (std::size_t i = 0; i < nfd.size();) {
      auto c = decode_utf8(q, nfd.size(), i);
      if (c.cp < 0x80 || !(char_class(c.cp) & kNonspacing)) d.append(nfd, i, c.len);
      i += c.len;
    }
    cur = d;
  }
  if (!o.lowercase) {
    out.assign(cur);
    return;
  }
  // 3. Lowercase, character by character.
  out.reserve(cur.size());
  const auto* q = reinterpret_cast<const unsigned char*>(cur.data());
  for (std::size_t i = 0; i < cur.size();) {
    if (q[i] < 0x80) {
      char ch = static_cast<char>(q[i]);
      out += (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch + 32) : ch;
      ++i;
      continue;
    }
    auto c = decode_utf8(q, cur.size(), i);
    append_lower(out, c.cp);
    i += c.len;
  }
}

}  // namespace lmp::text

namespace lmp::text {

int script_of(std::uint32_t cp) {
  if (cp >= kInvalidBase) return -1;
  UErrorCode st = U_ZERO_ERROR;
  UScriptCode s = uscript_getScript(static_cast<UChar32>(cp), &st);
  if (U_FAILURE(st)) return -1;
  if (s == USCRIPT_HIRAGANA || s == USCRIPT_KATAKANA || cp == 0x30FC) s = USCRIPT_HAN;
  return static_cast<int>(s);
}

}  // namespace lmp::text

namespace lmp::text {

bool is_assigned(std::uint32_t cp) {
  return cp < kInvalidBase && u_charType(static_cast<UChar32>(cp)) != U_UNASSIGNED;
}

std::uint32_t simple_case_fold(std::uint32_t cp) {
  if (cp >= kInvalidBase) return cp;
  return static_cast<std::uint32_t>(u_foldCase(static_cast<UChar32>(cp), U_FOLD_CASE_DEFAULT));
}

}  // namespace lmp::text

namespace lmp::text {

namespace {

// Cut `s` where `n` has a boundary before a character (an invalid byte is a piece of its
// own), run `f` on each piece, and record the sources. `whole` is f of all of `s`: when
// the pieces do not add up to it (a rule that looks across a boundary), every byte
// points at the whole input, so that the text is always the one the tokenizer encodes.
template <class F>
void aligned_by_pieces(std::string_view s, const UNormalizer2* n, NormalForm decomposed, std::string& out,
                       std::vector<SourceSpan>& src, F&& f) {
  out.clear();
  src.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string piece_out;
  std::string char_out, joined;
  std::vector<SourceSpan> char_src, owners;
  auto bytes = [&](std::size_t b, std::size_t e) {
    for (std::size_t k = b; k < e; ++k) src.push_back({static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k + 1)});
  };
  auto flush = [&](std::size_t b, std::size_t e) {
    if (e <= b) return;
    std::string_view in = s.substr(b, e - b);
    f(in, piece_out);
    out += piece_out;
    if (piece_out == in) {
      bytes(b, e);
      return;
    }
    // Character by character, when that gives the same text (a decomposition, a mapping,
    // a mark removed): each output from its own character, as HF aligns them.
    joined.clear();
    char_src.clear();
    for (std::size_t i = b; i < e;) {
      std::size_t len = decode_utf8(p, s.size(), i).len;
      std::string_view ch = s.substr(i, len);
      f(ch, char_out);
      joined += char_out;
      if (char_out == ch) {
        for (std::size_t k = i; k < i + len; ++k)
          char_src.push_back({static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k + 1)});
      } else {
        char_src.insert(char_src.end(), char_out.size(), {static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + len)});
      }
      i += len;
    }
    if (joined == piece_out) {
      src.insert(src.end(), char_src.begin(), char_src.end());
      return;
    }
    // Characters composed ("e" + U+0301 → "é"): decomposed, each input character owns
    // the positions of its decomposition, in input order (reordering the marks does not
    // move their owners); each output character takes as many positions as its own
    // decomposition has characters and comes from the owner of the first. So a composed
    // character comes from its starter, as in HF tokenizers' alignments.
    owners.clear();
    for (std::size_t i = b; i < e;) {
      std::size_t len = decode_utf8(p, s.size(), i).len;
      std::string d = normalize(s.substr(i, len), decomposed);
      std::size_t chars = 0;
      for (unsigned char c : d) chars += (c & 0xC0) != 0x80;
      owners.insert(owners.end(), std::max<std::size_t>(chars, 1),
                    {static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + len)});
      i += len;
    }
    const auto* q = reinterpret_cast<const unsigned char*>(piece_out.data());
    std::size_t at = 0;
    for (std::size_t o = 0; o < piece_out.size();) {
      std::size_t len = decode_utf8(q, piece_out.size(), o).len;
      std::string d = normalize(piece_out.substr(o, len), decomposed);
      std::size_t chars = 0;
      for (unsigned char c : d) chars += (c & 0xC0) != 0x80;
      src.insert(src.end(), len, owners[std::min(at, owners.size() - 1)]);
      at += std::max<std::size_t>(chars, 1);
      o += len;
    }
  };
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size();) {
    auto c = decode_utf8(p, s.size(), i);
    bool invalid = c.cp >= kInvalidBase;
    if (i > start && (invalid || c.cp < 0x80 || unorm2_hasBoundaryBefore(n, static_cast<UChar32>(c.cp)))) {
      flush(start, i);
      start = i;
    }
    i += c.len;
    if (invalid) {
      flush(start, i);
      start = i;
    }
  }
  flush(start, s.size());
  std::string whole;
  f(s, whole);
  if (whole != out) {
    out = std::move(whole);
    src.assign(out.size(), {0, static_cast<std::uint32_t>(s.size())});
  }
}

}  // namespace

SourceSpan source_of(const std::vector<SourceSpan>& src, std::uint32_t b, std::uint32_t e) {
  if (src.empty()) return {0, 0};
  if (b >= src.size()) return {src.back().end, src.back().end};
  if (e <= b) return {src[b].begin, src[b].begin};
  return {src[b].begin, std::max(src[b].begin, src[std::min<std::size_t>(e, src.size()) - 1].end)};
}

void normalize_aligned(std::string_view s, NormalForm form, std::string& out, std::vector<SourceSpan>& src) {
  NormalForm decomposed = form == NormalForm::nfc || form == NormalForm::nfd ? NormalForm::nfd : NormalForm::nfkd;
  aligned_by_pieces(s, instance(form), decomposed, out, src,
                    [form](std::string_view in, std::string& o) { o = normalize(in, form); });
}

void bert_normalize_aligned(std::string_view s, const BertNormalization& o, std::string& out,
                            std::vector<SourceSpan>& src) {
  // Cleaning, padding and lowercasing go character by character; accents are stripped
  // after NFD, whose boundaries are therefore the pieces'.
  aligned_by_pieces(s, instance(NormalForm::nfd), NormalForm::nfd, out, src,
                    [&o](std::string_view in, std::string& r) { bert_normalize(in, o, r); });
}

}  // namespace lmp::text
