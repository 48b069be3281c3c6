#include "byte_level_bpe.h"
#include "utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "json_file.h"

#include <algorithm>
#include <array>
#include <climits>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>

namespace attn::text {
namespace {

// GPT-2's pre-tokenization pattern, as Hugging Face tokenizers' ByteLevel pre-tokenizer uses it.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// GPT-2's bytes_to_unicode: each byte as a printable character (printable ASCII and Latin-1 stay themselves,
/// the rest move to U+0100 and up), so that every token is a string of visible characters.
std::array<std::string, 256> byte_characters() {
  std::array<std::string, 256> table;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    append_utf8(printable ? b : next++, table[b]);
  }
  return table;
}

/// The length of the UTF-8 character starting at s[i] (1 for a stray byte).
size_t utf8_length(std::string_view s, size_t i) {
  return std::min(utf8_sequence_length(static_cast<unsigned char>(s[i])), s.size() - i);
}

struct PairHash {
  size_t operator()(const std::pair<int32_t, int32_t>& p) const {
    return std::hash<int64_t>()((static_cast<int64_t>(p.first) << 32) ^ static_cast<uint32_t>(p.second));
  }
};

}  // namespace

struct ByteLevelBpe::State {
  std::unordered_map<std::string, int64_t> vocab;
  std::vector<std::string> tokens;  // by id
  std::vector<bool> special;        // by id
  // Merge ranks on pairs of token ids: lower merges first; the result's id.
  std::unordered_map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>, PairHash> merges;
  std::vector<std::pair<std::string, int64_t>> added;  // special tokens, longest first
  std::array<std::string, 256> byte_chars;
  std::unordered_map<std::string, uint8_t> char_bytes;  // the inverse of byte_chars
  // Each byte's token id, -1 where the vocabulary has none (bytes that valid UTF-8 never holds, e.g. 0xF5 to
  // 0xFF, may be absent): such a byte is dropped, as Hugging Face's BPE does without an unknown token.
  std::array<int32_t, 256> byte_ids{};
  bool split_digits = false;
  pcre2_code* pattern = nullptr;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache;  // piece -> ids

  ~State() { pcre2_code_free(pattern); }
};

ByteLevelBpe::ByteLevelBpe(std::unique_ptr<State> state) : state_(std::move(state)) {}
ByteLevelBpe::~ByteLevelBpe() = default;
ByteLevelBpe::ByteLevelBpe(ByteLevelBpe&&) noexcept = default;
ByteLevelBpe& ByteLevelBpe::operator=(ByteLevelBpe&&) noexcept = default;

// A function try block: nlohmann's own errors (a missing field, one of another type) name the file too.
ByteLevelBpe ByteLevelBpe::from_file(const std::string& path) try {
  const nlohmann::json j = attn_apps::read_json_file(path, "tokenizer");
  const auto invalid = [&path](const std::string& what) {
    return attn_apps::json_file_error("tokenizer", path, what);
  };
  auto s = std::make_unique<State>();
  const auto& model = j.at("model");
  if (model.value("type", "") != "BPE") throw invalid("the model is not BPE");
  if (j.contains("normalizer") && !j.at("normalizer").is_null()) throw invalid("a normalizer is not supported");

  // Pre-tokenizer: ByteLevel with its regex, optionally after Digits(individual_digits) in a Sequence.
  const auto& pre = j.at("pre_tokenizer");
  std::vector<nlohmann::json> steps = pre.value("type", "") == "Sequence" ? pre.at("pretokenizers").get<std::vector<nlohmann::json>>()
                                                                          : std::vector<nlohmann::json>{pre};
  bool byte_level = false;
  for (const auto& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "Digits" && step.value("individual_digits", false)) {
      s->split_digits = true;
    } else if (type == "ByteLevel" && step.value("use_regex", true) && !step.value("add_prefix_space", false)) {
      byte_level = true;
    } else {
      throw invalid("pre-tokenizer step '" + step.dump() + "' is not supported");
    }
  }
  if (!byte_level) throw invalid("no ByteLevel pre-tokenizer: not a byte-level BPE");

  for (const auto& [token, id] : model.at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    if (i < 0 || i > INT32_MAX) throw invalid("token id out of range");
    s->vocab[token] = i;
    if (static_cast<size_t>(i) >= s->tokens.size()) s->tokens.resize(i + 1);
    s->tokens[i] = token;
  }
  for (const auto& t : j.at("added_tokens")) {
    const int64_t i = t.at("id").get<int64_t>();
    const std::string content = t.at("content").get<std::string>();
    if (i < 0 || i > INT32_MAX) throw invalid("added token id out of range");
    if (static_cast<size_t>(i) >= s->tokens.size()) s->tokens.resize(i + 1);
    s->tokens[i] = content;
    s->vocab[content] = i;
    if (t.value("lstrip", false) || t.value("rstrip", false) || t.value("normalized", false)) {
      throw invalid("added token '" + content + "' strips or normalizes, which is not supported");
    }
    s->added.emplace_back(content, i);
  }
  s->special.assign(s->tokens.size(), false);
  for (const auto& [content, id] : s->added) s->special[id] = true;
  std::stable_sort(s->added.begin(), s->added.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  int32_t rank = 0;
  for (const auto& m : model.at("merges")) {
    std::string left, right;
    if (m.is_array()) {
      left = m.at(0).get<std::string>();
      right = m.at(1).get<std::string>();
    } else {  // the older "left right" form
      const std::string text = m.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos) throw invalid("merge '" + text + "' has no space");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    }
    const auto l = s->vocab.find(left), r = s->vocab.find(right), merged = s->vocab.find(left + right);
    if (l == s->vocab.end() || r == s->vocab.end() || merged == s->vocab.end()) {
      throw invalid("merge '" + left + " " + right + "' uses a token that is not in the vocabulary");
    }
    s->merges.emplace(std::make_pair(static_cast<int32_t>(l->second), static_cast<int32_t>(r->second)),
                      std::make_pair(rank++, static_cast<int32_t>(merged->second)));
  }

  s->byte_chars = byte_characters();
  for (int b = 0; b < 256; ++b) {
    s->char_bytes[s->byte_chars[b]] = static_cast<uint8_t>(b);
    const auto it = s->vocab.find(s->byte_chars[b]);
    s->byte_ids[b] = it == s->vocab.end() ? -1 : static_cast<int32_t>(it->second);
  }
  int error = 0;
  PCRE2_SIZE offset = 0;
  s->pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                             &error, &offset, nullptr);
  if (!s->pattern) throw std::logic_error("the GPT-2 pattern does not compile with this PCRE2");
  return ByteLevelBpe(std::move(s));
} catch (const nlohmann::json::exception& e) {
  throw attn_apps::json_file_error("tokenizer", path, e.what());
}

std::vector<int64_t> ByteLevelBpe::encode_piece(std::string_view piece) const {
  const State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.cache_mutex);
    const auto hit = s.cache.find(std::string(piece));
    if (hit != s.cache.end()) return hit->second;
  }
  // One symbol per byte (as its printable character), then the lowest-ranked adjacent pair merged, repeatedly.
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  for (unsigned char b : piece) {
    if (s.byte_ids[b] >= 0) symbols.push_back(s.byte_ids[b]);
  }
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), best_id = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = s.merges.find({symbols[i], symbols[i + 1]});
      if (it != s.merges.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_id = it->second.second;
        best = i;
      }
    }
    if (best_id < 0) break;
    symbols[best] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  std::vector<int64_t> ids(symbols.begin(), symbols.end());
  std::lock_guard<std::mutex> lock(s.cache_mutex);
  if (s.cache.size() < 100000) s.cache.emplace(std::string(piece), ids);
  return ids;
}

std::vector<int64_t> ByteLevelBpe::encode(std::string_view text) const {
  check_utf8(text, "tokenizer: the text");  // once, with the offset (PCRE2 says only that a part is not)
  const State& s = *state_;
  std::vector<int64_t> out;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(s.pattern, nullptr);
  const auto free_match = std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)>(match, pcre2_match_data_free);

  // Pre-tokenizes and encodes one stretch of text that holds no special token.
  const auto encode_plain = [&](std::string_view plain) {
    std::vector<std::string_view> parts;
    if (s.split_digits) {  // Digits(individual_digits): every ASCII digit on its own, the text between kept whole
      size_t start = 0;
      for (size_t i = 0; i < plain.size(); ++i) {
        if (plain[i] >= '0' && plain[i] <= '9') {
          if (i > start) parts.push_back(plain.substr(start, i - start));
          parts.push_back(plain.substr(i, 1));
          start = i + 1;
        }
      }
      if (start < plain.size()) parts.push_back(plain.substr(start));
    } else {
      parts.push_back(plain);
    }
    for (std::string_view part : parts) {
      size_t at = 0;
      while (at < part.size()) {
        const int rc = pcre2_match(s.pattern, reinterpret_cast<PCRE2_SPTR>(part.data()), part.size(), at, 0, match, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
            throw std::invalid_argument("tokenizer: the text is not valid UTF-8");
          }
          throw std::runtime_error("tokenizer: PCRE2 match failed (" + std::to_string(rc) + ")");
        }
        const PCRE2_SIZE* v = pcre2_get_ovector_pointer(match);
        if (v[1] == v[0]) {  // an empty match cannot happen with this pattern; step on rather than loop
          at += utf8_length(part, at);
          continue;
        }
        const std::vector<int64_t> ids = encode_piece(part.substr(v[0], v[1] - v[0]));
        out.insert(out.end(), ids.begin(), ids.end());
        at = v[1];
      }
    }
  };

  // Special tokens first: the earliest occurrence, and the longest one there.
  size_t at = 0;
  while (at < text.size()) {
    size_t found = std::string_view::npos;
    const std::pair<std::string, int64_t>* which = nullptr;
    for (const auto& a : s.added) {
      const size_t pos = text.find(a.first, at);
      if (pos < found) {
        found = pos;
        which = &a;
      }
    }
    if (!which) {
      encode_plain(text.substr(at));
      break;
    }
    if (found > at) encode_plain(text.substr(at, found - at));
    out.push_back(which->second);
    at = found + which->first.size();
  }
  return out;
}

std::string ByteLevelBpe::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  const State& s = *state_;
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= s.tokens.size()) {
      throw std::out_of_range("tokenizer: id " + std::to_string(id) + " is outside the vocabulary (size " +
                              std::to_string(s.tokens.size()) + ")");
    }
    const std::string& token = s.tokens[id];
    if (s.special[id]) {
      if (!skip_special) out += token;
      continue;
    }
    for (size_t i = 0; i < token.size();) {
      const size_t n = utf8_length(token, i);
      const auto b = s.char_bytes.find(token.substr(i, n));
      if (b == s.char_bytes.end()) {
        out += token.substr(i, n);  // not a byte character (cannot happen in a byte-level vocabulary)
      } else {
        out += static_cast<char>(b->second);
      }
      i += n;
    }
  }
  return out;
}

int64_t ByteLevelBpe::token_id(const std::string& token) const {
  const auto it = state_->vocab.find(token);
  return it == state_->vocab.end() ? -1 : it->second;
}

int64_t ByteLevelBpe::vocab_size() const { return static_cast<int64_t>(state_->tokens.size()); }

bool ByteLevelBpe::is_special(int64_t id) const {
  return id >= 0 && static_cast<size_t>(id) < state_->special.size() && state_->special[id];
}

}  // namespace attn::text
