#include "word_piece.h"
#include "utf8.h"

#include <utf8proc.h>

#include "json_file.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <stdexcept>
#include <unordered_map>

namespace attn::text {
namespace {

// Unicode data. utf8proc (Unicode 15.0 on Debian 12) gives the categories, NFD and lowercasing, but Hugging Face
// `tokenizers` takes its categories from the unicode_categories crate 0.1.1, whose tables are Unicode 8.0, its NFD
// from unicode-normalization-alignments 0.1.12 (Unicode 9.0), and its lowercasing from Rust's std (Unicode 17.0 in
// tokenizers 0.23's wheels). The tables below are the code points where utf8proc's Unicode 15.0 answer differs
// from those (all of them characters assigned or recategorized since 8.0, or case pairs added after 15.0), so that
// every character is treated as Hugging Face treats it. A utf8proc newer than 15.0 would bring in the categories of
// the characters added since, which these tables do not undo.

struct Range {
  char32_t first, last;
};

template <size_t N>
bool in_ranges(const Range (&ranges)[N], char32_t c) {
  const Range* it = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                     [](char32_t v, const Range& r) { return v < r.first; });
  return it != std::begin(ranges) && c <= (it - 1)->last;
}

// Cc, Cf or Co in Unicode 15.0 but not in Unicode 8.0 (new format characters).
constexpr Range kControlSince8[] = {
    {0x0890, 0x0891}, {0x08E2, 0x08E2}, {0x110CD, 0x110CD}, {0x13430, 0x1343F},
};
// P* in Unicode 15.0 but not in Unicode 8.0.
constexpr Range kPunctuationSince8[] = {
    {0x061D, 0x061D}, {0x09FD, 0x09FD}, {0x0A76, 0x0A76}, {0x0C77, 0x0C77}, {0x0C84, 0x0C84}, {0x1B7D, 0x1B7E},
    {0x2E43, 0x2E4F}, {0x2E52, 0x2E5D}, {0x10EAD, 0x10EAD}, {0x10F55, 0x10F59}, {0x10F86, 0x10F89},
    {0x1144B, 0x1144F}, {0x1145A, 0x1145B}, {0x1145D, 0x1145D}, {0x11660, 0x1166C}, {0x116B9, 0x116B9},
    {0x1183B, 0x1183B}, {0x11944, 0x11946}, {0x119E2, 0x119E2}, {0x11A3F, 0x11A46}, {0x11A9A, 0x11A9C},
    {0x11A9E, 0x11AA2}, {0x11B00, 0x11B09}, {0x11C41, 0x11C45}, {0x11C70, 0x11C71}, {0x11EF7, 0x11EF8},
    {0x11F43, 0x11F4F}, {0x11FFF, 0x11FFF}, {0x12FF1, 0x12FF2}, {0x16E97, 0x16E9A}, {0x16FE2, 0x16FE2},
    {0x1E95E, 0x1E95F},
};
// Mn in Unicode 15.0 but not in Unicode 8.0.
constexpr Range kNonspacingMarkSince8[] = {
    {0x07FD, 0x07FD}, {0x0898, 0x089F}, {0x08CA, 0x08E1}, {0x09FE, 0x09FE}, {0x0AFA, 0x0AFF}, {0x0B55, 0x0B55},
    {0x0C04, 0x0C04}, {0x0C3C, 0x0C3C}, {0x0D00, 0x0D00}, {0x0D3B, 0x0D3C}, {0x0D81, 0x0D81}, {0x0EBA, 0x0EBA},
    {0x0ECE, 0x0ECE}, {0x180F, 0x180F}, {0x1885, 0x1886}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFB}, {0xA82C, 0xA82C},
    {0xA8C5, 0xA8C5}, {0xA8FF, 0xA8FF}, {0xA9BD, 0xA9BD}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF},
    {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x110C2, 0x110C2},
    {0x111C9, 0x111C9}, {0x111CF, 0x111CF}, {0x1123E, 0x1123E}, {0x11241, 0x11241}, {0x1133B, 0x1133B},
    {0x11438, 0x1143F}, {0x11442, 0x11444}, {0x11446, 0x11446}, {0x1145E, 0x1145E}, {0x1182F, 0x11837},
    {0x11839, 0x1183A}, {0x1193B, 0x1193C}, {0x1193E, 0x1193E}, {0x11943, 0x11943}, {0x119D4, 0x119D7},
    {0x119DA, 0x119DB}, {0x119E0, 0x119E0}, {0x11A01, 0x11A0A}, {0x11A33, 0x11A38}, {0x11A3B, 0x11A3E},
    {0x11A47, 0x11A47}, {0x11A51, 0x11A56}, {0x11A59, 0x11A5B}, {0x11A8A, 0x11A96}, {0x11A98, 0x11A99},
    {0x11C30, 0x11C36}, {0x11C38, 0x11C3D}, {0x11C3F, 0x11C3F}, {0x11C92, 0x11CA7}, {0x11CAA, 0x11CB0},
    {0x11CB2, 0x11CB3}, {0x11CB5, 0x11CB6}, {0x11D31, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D},
    {0x11D3F, 0x11D45}, {0x11D47, 0x11D47}, {0x11D90, 0x11D91}, {0x11D95, 0x11D95}, {0x11D97, 0x11D97},
    {0x11EF3, 0x11EF4}, {0x11F00, 0x11F01}, {0x11F36, 0x11F3A}, {0x11F40, 0x11F40}, {0x11F42, 0x11F42},
    {0x13440, 0x13440}, {0x13447, 0x13455}, {0x16F4F, 0x16F4F}, {0x16FE4, 0x16FE4}, {0x1CF00, 0x1CF2D},
    {0x1CF30, 0x1CF46}, {0x1E000, 0x1E006}, {0x1E008, 0x1E018}, {0x1E01B, 0x1E021}, {0x1E023, 0x1E024},
    {0x1E026, 0x1E02A}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF},
    {0x1E4EC, 0x1E4EF}, {0x1E944, 0x1E94A},
};

// Combining marks assigned after Unicode 9.0, whose nonzero combining classes NFD in `tokenizers` does not know
// (it treats them as starters, so they are never reordered).
constexpr Range kCombiningSince9[] = {
    {0x07FD, 0x07FD}, {0x0898, 0x089F}, {0x08CA, 0x08D3}, {0x09FE, 0x09FE}, {0x0C3C, 0x0C3C}, {0x0D3B, 0x0D3C},
    {0x0EBA, 0x0EBA}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA}, {0xA82C, 0xA82C}, {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070},
    {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x1193D, 0x1193E}, {0x11943, 0x11943},
    {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42},
    {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F},
    {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
};
// Uppercase letters of Unicode 16.0 and 17.0, which utf8proc's 15.0 does not lowercase: first, last, and the
// lowercase of first (the others follow in order).
struct CaseRange {
  char32_t first, last, lower;
};
constexpr CaseRange kLowercaseSince15[] = {
    {0x1C89, 0x1C89, 0x1C8A}, {0xA7CB, 0xA7CB, 0x0264}, {0xA7CC, 0xA7CC, 0xA7CD}, {0xA7CE, 0xA7CE, 0xA7CF},
    {0xA7D2, 0xA7D2, 0xA7D3}, {0xA7D4, 0xA7D4, 0xA7D5}, {0xA7DA, 0xA7DA, 0xA7DB}, {0xA7DC, 0xA7DC, 0x019B},
    {0x10D50, 0x10D65, 0x10D70}, {0x16EA0, 0x16EB8, 0x16EBB},
};

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

/// Control characters as BertNormalizer's clean_text removes them: Cc, Cf and Co, except tab and line ends.
bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const utf8proc_category_t cat = category(c);
  return (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO) &&
         !in_ranges(kControlSince8, c);
}

/// Rust's char::is_whitespace (the White_Space property), which `tokenizers` uses; utf8proc does not have it.
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/// BertPreTokenizer's punctuation: all of ASCII's non-alphanumeric printables (so $, +, <, =, >, ^, `, |, ~ too),
/// and the P* categories.
bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  if (c == 0x111C9 || c == 0x166D) return true;  // Po in Unicode 8.0 (now Mn and So)
  const utf8proc_category_t cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO && !in_ranges(kPunctuationSince8, c);
}

/// The accents that strip_accents removes after NFD: Mn.
bool is_nonspacing_mark(char32_t c) {
  if (c == 0x1734) return true;  // Mn in Unicode 8.0 (now Mc)
  return category(c) == UTF8PROC_CATEGORY_MN && !in_ranges(kNonspacingMarkSince8, c);
}

/// The code points that handle_chinese_chars puts spaces around: `tokenizers`' list of CJK ideograph blocks.
bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/// Appends the canonical decomposition (NFD) of `text` to `out`: each character decomposed, then each run of
/// combining marks put in canonical order.
void append_nfd(std::u32string_view text, std::u32string& out) {
  const size_t first = out.size();
  for (char32_t c : text) {
    // U+11938 (Dives Akuru, Unicode 13) is the one canonical decomposition that Unicode 9.0 lacks.
    if (c == 0x11938) {
      out += c;
      continue;
    }
    utf8proc_int32_t buffer[8];
    int boundclass = UTF8PROC_BOUNDCLASS_START;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buffer, 8,
                                                       UTF8PROC_DECOMPOSE, &boundclass);
    if (n < 0 || n > 8) throw std::logic_error("utf8proc cannot decompose code point " + std::to_string(c));
    for (utf8proc_ssize_t i = 0; i < n; ++i) out += static_cast<char32_t>(buffer[i]);
  }
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  const auto ccc = [](char32_t c) -> int {
    if (in_ranges(kCombiningSince9, c)) return 0;
    return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
  };
  for (size_t i = first + 1; i < out.size(); ++i) {
    const char32_t c = out[i];
    const auto k = ccc(c);
    if (k == 0) continue;
    size_t j = i;
    while (j > first && ccc(out[j - 1]) > k) {
      out[j] = out[j - 1];
      --j;
    }
    out[j] = c;
  }
}

/// Rust's char::to_lowercase, which `tokenizers` uses: the simple lowercase mapping, except that U+0130 (İ)
/// becomes two characters, the one unconditional multi-character lowercasing of SpecialCasing.txt.
void append_lowercase(char32_t c, std::u32string& out) {
  if (c == 0x130) {
    out += U'i';
    out += char32_t{0x307};
    return;
  }
  for (const CaseRange& r : kLowercaseSince15) {
    if (c >= r.first && c <= r.last) {
      out += r.lower + (c - r.first);
      return;
    }
  }
  out += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

/// The code points of UTF-8 `text`. Throws std::invalid_argument where it is not valid UTF-8.
std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  for (size_t at = 0; at < text.size();) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(text.size() - at), &c);
    if (n <= 0 || c < 0) {
      throw std::invalid_argument("tokenizer: the text is not valid UTF-8 (at byte " + std::to_string(at) + ")");
    }
    out += static_cast<char32_t>(c);
    at += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace

struct WordPiece::State {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::string> tokens;  // by id
  int64_t unk = -1, pad = -1;
  std::string prefix;             // continuing_subword_prefix, "##"
  size_t max_chars = 100;         // max_input_chars_per_word: longer words are [UNK] whole
  bool clean_text = false, chinese = false, strip_accents = false, lowercase = false;
  std::vector<std::pair<std::u32string, int64_t>> added;  // tokens matched in the raw text, longest first
  std::vector<int64_t> before, after;                    // the template's special tokens around the text
};

WordPiece::WordPiece(std::unique_ptr<State> state) : state_(std::move(state)) {}
WordPiece::~WordPiece() = default;
WordPiece::WordPiece(WordPiece&&) noexcept = default;
WordPiece& WordPiece::operator=(WordPiece&&) noexcept = default;

// A function try block: nlohmann's own errors (a missing field, one of another type) name the file too.
WordPiece WordPiece::from_file(const std::string& path) try {
  const nlohmann::json j = attn_apps::read_json_file(path, "tokenizer");
  const auto invalid = [&path](const std::string& what) {
    return attn_apps::json_file_error("tokenizer", path, what);
  };
  auto s = std::make_unique<State>();
  try {
    const auto& model = j.at("model");
    if (model.value("type", "") != "WordPiece") throw invalid("the model is not WordPiece");
    for (const auto& [token, id] : model.at("vocab").items()) {
      const int64_t i = id.get<int64_t>();
      if (i < 0 || i > INT32_MAX) throw invalid("token id out of range");
      s->vocab[token] = i;
      if (static_cast<size_t>(i) >= s->tokens.size()) s->tokens.resize(i + 1);
      s->tokens[i] = token;
    }
    const std::string unk = model.at("unk_token").get<std::string>();
    const auto unk_it = s->vocab.find(unk);
    if (unk_it == s->vocab.end()) throw invalid("the unknown token '" + unk + "' is not in the vocabulary");
    s->unk = unk_it->second;
    s->prefix = model.value("continuing_subword_prefix", "##");
    s->max_chars = model.value("max_input_chars_per_word", size_t{100});

    // Normalizer: BertNormalizer, any of its settings; strip_accents null means "as lowercase".
    const auto& norm = j.at("normalizer");
    if (norm.is_null() || norm.value("type", "") != "BertNormalizer") {
      throw invalid("normalizer '" + norm.dump() + "' is not supported (only BertNormalizer)");
    }
    s->clean_text = norm.value("clean_text", true);
    s->chinese = norm.value("handle_chinese_chars", true);
    s->lowercase = norm.value("lowercase", true);
    const auto strip = norm.find("strip_accents");
    s->strip_accents = strip == norm.end() || strip->is_null() ? s->lowercase : strip->get<bool>();

    const auto& pre = j.at("pre_tokenizer");
    if (pre.is_null() || pre.value("type", "") != "BertPreTokenizer") {
      throw invalid("pre-tokenizer '" + pre.dump() + "' is not supported (only BertPreTokenizer)");
    }

    // Added tokens ([CLS], [MASK]...) are found in the raw text before normalization, as written.
    for (const auto& t : j.value("added_tokens", nlohmann::json::array())) {
      const std::string content = t.at("content").get<std::string>();
      const int64_t i = t.at("id").get<int64_t>();
      if (i < 0 || i > INT32_MAX) throw invalid("added token id out of range");
      if (content.empty() || t.value("lstrip", false) || t.value("rstrip", false) || t.value("single_word", false) ||
          t.value("normalized", false)) {
        throw invalid("added token '" + content + "' is empty, strips, is single-word or is normalized, "
                               "which is not supported");
      }
      if (static_cast<size_t>(i) >= s->tokens.size()) s->tokens.resize(i + 1);
      s->tokens[i] = content;
      s->vocab[content] = i;
      s->added.emplace_back(decode_utf8(content), i);
    }
    std::stable_sort(s->added.begin(), s->added.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

    // Post-processor: the single-sequence template (special tokens, $A, special tokens), or BertProcessing.
    const auto special_ids = [&](const std::string& name) {
      const auto it = s->vocab.find(name);
      if (it == s->vocab.end()) throw invalid("special token '" + name + "' is not in the vocabulary");
      return it->second;
    };
    const auto& post = j.at("post_processor");
    const std::string post_type = post.is_null() ? "" : post.value("type", "");
    if (post_type == "TemplateProcessing") {
      bool seen_sequence = false;
      for (const auto& piece : post.at("single")) {
        if (piece.contains("Sequence")) {
          if (piece.at("Sequence").value("id", "") != "A" || seen_sequence) {
            throw invalid("post-processor template '" + post.at("single").dump() + "' is not supported");
          }
          seen_sequence = true;
        } else if (piece.contains("SpecialToken")) {
          const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
          std::vector<int64_t>& side = seen_sequence ? s->after : s->before;
          if (post.contains("special_tokens") && post.at("special_tokens").contains(name)) {
            for (const auto& id : post.at("special_tokens").at(name).at("ids")) side.push_back(id.get<int64_t>());
          } else {
            side.push_back(special_ids(name));
          }
        } else {
          throw invalid("post-processor template piece '" + piece.dump() + "' is not supported");
        }
      }
      if (!seen_sequence) throw invalid("post-processor template has no $A");
    } else if (post_type == "BertProcessing") {
      s->before.push_back(post.at("cls").at(1).get<int64_t>());
      s->after.push_back(post.at("sep").at(1).get<int64_t>());
    } else if (!post.is_null()) {
      throw invalid("post-processor '" + post_type + "' is not supported");
    }

    // Padding and truncation in the file are defaults for batch callers (transformers replaces them per call),
    // not part of a text's ids; only the padding id is kept.
    s->pad = s->vocab.count("[PAD]") ? s->vocab.at("[PAD]") : -1;
    if (j.contains("padding") && j.at("padding").is_object()) s->pad = j.at("padding").value("pad_id", s->pad);
  } catch (const nlohmann::json::exception& e) {
    throw invalid(std::string("unexpected layout: ") + e.what());
  } catch (const std::invalid_argument&) {
    throw invalid("a token is not valid UTF-8");
  }
  return WordPiece(std::move(s));
} catch (const nlohmann::json::exception& e) {
  throw attn_apps::json_file_error("tokenizer", path, e.what());
}

namespace {

/// BertNormalizer on `text`, in `tokenizers`' order: clean, CJK spacing, NFD and accent stripping, lowercasing.
std::u32string normalize(std::u32string_view text, bool clean_text, bool chinese, bool strip_accents,
                         bool lowercase) {
  std::u32string a;
  a.reserve(text.size());
  for (char32_t c : text) {
    if (clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) c = U' ';
    }
    if (chinese && is_chinese(c)) {
      a += U' ';
      a += c;
      a += U' ';
    } else {
      a += c;
    }
  }
  if (strip_accents) {
    std::u32string decomposed;
    decomposed.reserve(a.size());
    append_nfd(a, decomposed);
    a.clear();
    for (char32_t c : decomposed) {
      if (!is_nonspacing_mark(c)) a += c;
    }
  }
  if (!lowercase) return a;
  std::u32string lower;
  lower.reserve(a.size());
  for (char32_t c : a) append_lowercase(c, lower);
  return lower;
}

}  // namespace

std::vector<int64_t> WordPiece::encode(std::string_view text, bool add_special_tokens) const {
  const State& s = *state_;
  const std::u32string chars = decode_utf8(text);
  std::vector<int64_t> out;
  if (add_special_tokens) out = s.before;

  // WordPiece on one word: the longest vocabulary entry from the start, then the longest "##" entry from where
  // it ended, and so on; a word that cannot be covered, or is longer than max_chars, is [UNK] whole.
  std::string utf8, candidate;
  std::vector<size_t> offsets;  // byte offset of each character in utf8, and the end
  const auto encode_word = [&](std::u32string_view word) {
    if (word.empty()) return;
    if (word.size() > s.max_chars) {
      out.push_back(s.unk);
      return;
    }
    utf8.clear();
    offsets.clear();
    for (char32_t c : word) {
      offsets.push_back(utf8.size());
      append_utf8(c, utf8);
    }
    offsets.push_back(utf8.size());
    const size_t first_id = out.size();
    for (size_t start = 0; start < word.size();) {
      size_t end = word.size();
      for (; end > start; --end) {
        candidate.assign(start > 0 ? s.prefix : std::string());
        candidate.append(utf8, offsets[start], offsets[end] - offsets[start]);
        const auto it = s.vocab.find(candidate);
        if (it != s.vocab.end()) {
          out.push_back(it->second);
          break;
        }
      }
      if (end == start) {
        out.resize(first_id);
        out.push_back(s.unk);
        return;
      }
      start = end;
    }
  };

  // Normalizes and pre-tokenizes a stretch of text that holds no added token: whitespace ends words, and each
  // punctuation character is a word of its own.
  const auto encode_plain = [&](std::u32string_view plain) {
    const std::u32string normalized = normalize(plain, s.clean_text, s.chinese, s.strip_accents, s.lowercase);
    size_t word_start = 0;
    for (size_t i = 0; i < normalized.size(); ++i) {
      const char32_t c = normalized[i];
      if (is_whitespace(c) || is_punctuation(c)) {
        encode_word(std::u32string_view(normalized).substr(word_start, i - word_start));
        if (!is_whitespace(c)) encode_word(std::u32string_view(normalized).substr(i, 1));
        word_start = i + 1;
      }
    }
    encode_word(std::u32string_view(normalized).substr(word_start));
  };

  // Added tokens first: the earliest occurrence, and the longest one there. Each token's next occurrence is
  // remembered, so the text is searched once per token rather than once per match.
  std::vector<size_t> next(s.added.size(), 0);
  for (size_t k = 0; k < s.added.size(); ++k) next[k] = chars.find(s.added[k].first);
  const std::u32string_view all(chars);
  size_t at = 0;
  while (at < chars.size()) {
    size_t found = std::u32string::npos, which = 0;
    for (size_t k = 0; k < s.added.size(); ++k) {
      if (next[k] != std::u32string::npos && next[k] < at) next[k] = chars.find(s.added[k].first, at);
      if (next[k] < found) {
        found = next[k];
        which = k;
      }
    }
    if (found == std::u32string::npos) {
      encode_plain(all.substr(at));
      break;
    }
    if (found > at) encode_plain(all.substr(at, found - at));
    out.push_back(s.added[which].second);
    at = found + s.added[which].first.size();
  }
  if (add_special_tokens) out.insert(out.end(), s.after.begin(), s.after.end());
  return out;
}

std::vector<int64_t> WordPiece::encode_truncated(std::string_view text, size_t max_length,
                                                 bool add_special_tokens) const {
  const State& s = *state_;
  const size_t specials = add_special_tokens ? s.before.size() + s.after.size() : 0;
  if (max_length < specials) {
    throw std::invalid_argument("tokenizer: max_length " + std::to_string(max_length) + " cannot hold the " +
                                std::to_string(specials) + " special tokens");
  }
  std::vector<int64_t> ids = encode(text, /*add_special_tokens=*/false);
  if (ids.size() > max_length - specials) ids.resize(max_length - specials);
  if (!add_special_tokens) return ids;
  std::vector<int64_t> out = s.before;
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), s.after.begin(), s.after.end());
  return out;
}

int64_t WordPiece::token_id(const std::string& token) const {
  const auto it = state_->vocab.find(token);
  return it == state_->vocab.end() ? -1 : it->second;
}

std::string WordPiece::token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw std::out_of_range("tokenizer: id " + std::to_string(id) + " is outside the vocabulary (size " +
                            std::to_string(vocab_size()) + ")");
  }
  return state_->tokens[static_cast<size_t>(id)];
}

int64_t WordPiece::vocab_size() const { return static_cast<int64_t>(state_->tokens.size()); }

int64_t WordPiece::pad_id() const { return state_->pad; }

}  // namespace attn::text
