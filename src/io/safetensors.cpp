// safetensors: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
// then the raw little-endian data, offsets relative to its start. The JSON goes through nlohmann::json
// (Debian's nlohmann-json3-dev); every offset, size and dtype is checked against the file before any copy.

#include "io/formats.h"

#include <nlohmann/json.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

namespace attn::io::detail {
namespace {

// A header larger than this is refused before it is parsed (the format's own reference reader uses 100 MB).
constexpr uint64_t kMaxHeader = 100u << 20;

const std::pair<const char*, at::ScalarType> kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
    {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool},
};

at::ScalarType parse_dtype(const std::string& name, const std::string& tensor, const std::string& path) {
  for (const auto& [n, t] : kDtypes) {
    if (name == n) return t;
  }
  TORCH_CHECK(false, "attn::io: ", path, ": tensor '", tensor, "' has unsupported dtype '", name, "'");
}

const char* dtype_code(at::ScalarType dtype) {
  for (const auto& [n, t] : kDtypes) {
    if (t == dtype) return n;
  }
  TORCH_CHECK(false, "attn::io: safetensors cannot store ", c10::toString(dtype));
}

struct Entry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

/// The header's length, from the file's first 8 bytes, checked against the file's size.
uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& path) {
  TORCH_CHECK(file_size >= 8, "attn::io: ", path, ": too short for a safetensors file (", file_size, " bytes)");
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(first8[i]) << (8 * i);
  TORCH_CHECK(header_size <= kMaxHeader, "attn::io: ", path, ": safetensors header of ", header_size,
              " bytes exceeds the ", kMaxHeader, "-byte limit");
  TORCH_CHECK(header_size <= file_size - 8, "attn::io: ", path, ": safetensors header of ", header_size,
              " bytes runs past the end of the ", file_size, "-byte file");
  return header_size;
}

/// The header's tensors in the order of their data, each checked against the data_size bytes that follow the
/// header: dtype, shape, offsets inside the data and no two overlapping.
std::vector<Entry> parse_header(const uint8_t* text, uint64_t header_size, uint64_t data_size,
                                const std::string& path) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_size);
  } catch (const nlohmann::json::exception& e) {
    TORCH_CHECK(false, "attn::io: ", path, ": the safetensors header is not valid JSON: ", e.what());
  }
  TORCH_CHECK(header.is_object(), "attn::io: ", path, ": the safetensors header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    // Named copies rather than a structured binding, which a C++17 lambda (bad) cannot capture.
    const std::string name = item.key();
    const nlohmann::json& info = item.value();
    if (name == "__metadata__") continue;
    const auto bad = [&](const char* what) {
      TORCH_CHECK(false, "attn::io: ", path, ": tensor '", name, "': ", what);
    };
    if (!info.is_object()) bad("its entry is not an object");
    if (!info.contains("dtype") || !info["dtype"].is_string()) bad("no dtype string");
    if (!info.contains("shape") || !info["shape"].is_array()) bad("no shape array");
    if (!info.contains("data_offsets") || !info["data_offsets"].is_array() || info["data_offsets"].size() != 2) {
      bad("data_offsets is not a [begin, end] pair");
    }
    Entry e{name, parse_dtype(info["dtype"].get<std::string>(), name, path), {}, 0, 0};
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) bad("a shape entry is not a non-negative integer");
      const uint64_t n = d.get<uint64_t>();
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) bad("a dimension is too large");
      if (n != 0 && numel > std::numeric_limits<uint64_t>::max() / n) overflow = true;
      numel *= n;
      e.shape.push_back(static_cast<int64_t>(n));
    }
    for (const auto& o : info["data_offsets"]) {
      if (!o.is_number_unsigned()) bad("data_offsets are not non-negative integers");
    }
    e.begin = info["data_offsets"][0].get<uint64_t>();
    e.end = info["data_offsets"][1].get<uint64_t>();
    const size_t element = c10::elementSize(e.dtype);
    if (overflow || numel > std::numeric_limits<uint64_t>::max() / element) bad("its size overflows");
    if (e.begin > e.end || e.end > data_size) {
      TORCH_CHECK(false, "attn::io: ", path, ": tensor '", name, "': data_offsets [", e.begin, ", ", e.end,
                  "] lie outside the ", data_size, " bytes of data");
    }
    if (e.end - e.begin != numel * element) {
      TORCH_CHECK(false, "attn::io: ", path, ": tensor '", name, "': data_offsets span ", e.end - e.begin,
                  " bytes, but shape ", e.shape, " of ", info["dtype"].get<std::string>(), " needs ",
                  numel * element);
    }
    entries.push_back(std::move(e));
  }
  // Tensors may not share bytes: a well-formed file lays them out one after another.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i) {
    TORCH_CHECK(entries[i].begin >= entries[i - 1].end, "attn::io: ", path, ": tensors '", entries[i - 1].name,
                "' and '", entries[i].name, "' overlap in the data");
  }
  return entries;
}

}  // namespace

TensorMap read_safetensors(const std::vector<uint8_t>& bytes, const std::string& path) {
  const uint64_t header_size = header_length(bytes.data(), bytes.size(), path);
  const uint8_t* data = bytes.data() + 8 + header_size;
  TensorMap out;
  for (const Entry& e : parse_header(bytes.data() + 8, header_size, bytes.size() - 8 - header_size, path)) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    out[e.name] = t;
  }
  return out;
}

TensorMap read_safetensors_file(const std::string& path) {
  std::ifstream in = open_regular_file(path);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  uint8_t first8[8] = {};
  in.seekg(0);
  in.read(reinterpret_cast<char*>(first8), std::min<uint64_t>(8, file_size));
  const uint64_t header_size = header_length(first8, file_size, path);
  std::vector<uint8_t> header(header_size);
  TORCH_CHECK(in.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(header_size)),
              "attn::io: reading '", path, "' failed");
  const uint64_t data_start = 8 + header_size;
  // In the file's order, each tensor's bytes read straight into its storage.
  TensorMap out;
  for (const Entry& e : parse_header(header.data(), header_size, file_size - data_start, path)) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    if (e.end > e.begin) {
      in.seekg(static_cast<std::streamoff>(data_start + e.begin));
      TORCH_CHECK(in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin)),
                  "attn::io: reading '", path, "' failed at tensor '", e.name, "'");
    }
    out[e.name] = t;
  }
  return out;
}

std::string safetensors_bytes(const TensorMap& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<at::Tensor> ordered;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const at::Tensor cpu = t.detach().to(at::kCPU).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {{"dtype", dtype_code(cpu.scalar_type())}, {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    ordered.push_back(cpu);
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(json.size()) >> (8 * i)) & 0xff);
  out += json;
  for (const auto& t : ordered) {
    out.append(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * t.element_size());
  }
  return out;
}

}  // namespace attn::io::detail
