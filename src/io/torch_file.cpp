// torch.save files: the zip archive (data.pkl + data/<key> records, read with LibTorch's own zip reader) and
// the legacy stream of pickles (magic, protocol, sys_info, the object, the storage keys, then the raw
// storages). The pickles go through the restricted reader in io/pickle.h.

#include "io/formats.h"
#include "io/pickle.h"

#include <caffe2/serialize/read_adapter_interface.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

namespace attn::io::detail {
namespace {

using Kind = PickleValue::Kind;

/// Collects the tensors of a (possibly nested) dict: {name: tensor} or {prefix: {name: tensor}}, under dotted
/// names (an int key, as in an optimizer's state, reads as its digits). Entries that are not tensors or dicts
/// (a checkpoint's step, a config string, a list of param groups) go to `skipped` as "name (kind)".
void collect(const PickleRef& value, const std::string& prefix, std::vector<std::pair<std::string, TensorSpec>>& out,
             std::vector<std::string>& skipped, const std::string& path) {
  TORCH_CHECK(value->kind == Kind::Dict, "attn::io: ", path, ": ", prefix.empty() ? "the file" : "'" + prefix + "'",
              " holds a ", value->kind_name(), ", expected a dict of tensors (a state_dict)");
  for (const auto& [key, item] : value->dict) {
    std::string leaf;
    if (key->kind == Kind::String) {
      leaf = key->text;
    } else if (key->kind == Kind::Int) {
      leaf = std::to_string(key->integer);
    } else {
      skipped.push_back(c10::str(prefix.empty() ? "" : prefix + ".", "<", key->kind_name(), " key> (",
                                 item->kind_name(), ")"));
      continue;
    }
    const std::string name = prefix.empty() ? leaf : prefix + "." + leaf;
    if (item->kind == Kind::Dict) {
      collect(item, name, out, skipped, path);
    } else if (item->kind == Kind::Tensor) {
      out.emplace_back(name, item->tensor);
    } else {
      skipped.push_back(c10::str(name, " (", item->kind_name(), ")"));
    }
  }
}

/// Number of elements a view reaches into its storage (offset + extent), refusing overflow.
int64_t reach(const TensorSpec& t) {
  if (t.offset < 0) return -1;
  int64_t end = t.offset;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    if (t.sizes[i] == 0) return t.offset;  // an empty tensor reads nothing
  }
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    const int64_t step = t.sizes[i] - 1;
    if (step > 0 && t.strides[i] > (std::numeric_limits<int64_t>::max() - end) / step) return -1;
    end += step * t.strides[i];
  }
  return end + 1;
}

/// The tensor `spec` describes, copied out of `storage` (numel elements of spec.dtype).
at::Tensor materialise(const std::string& name, const TensorSpec& spec, const at::Tensor& storage,
                       const std::string& path) {
  const int64_t end = reach(spec);
  TORCH_CHECK(end >= 0 && end <= storage.numel(), "attn::io: ", path, ": tensor '", name, "' (size ", spec.sizes,
              ", stride ", spec.strides, ", offset ", spec.offset, ") reaches past its storage of ", storage.numel(),
              " elements");
  TORCH_CHECK(storage.scalar_type() == spec.dtype, "attn::io: ", path, ": tensor '", name,
              "' and its storage disagree on the dtype");
  // A view with more elements than its storage (stride 0) would let a tiny file ask for a huge copy.
  const bool empty = std::find(spec.sizes.begin(), spec.sizes.end(), 0) != spec.sizes.end();
  int64_t numel = 1;
  bool fits = true;
  for (const int64_t size : spec.sizes) {
    if (empty) break;
    fits = fits && numel <= storage.numel() / size;  // no overflow: numel * size <= storage.numel()
    if (!fits) break;
    numel *= size;
  }
  TORCH_CHECK(empty || fits, "attn::io: ", path, ": tensor '", name, "' (size ", spec.sizes,
              ") has more elements than its storage of ", storage.numel(),
              "; overlapping views are not supported in weight files");
  return storage.as_strided(spec.sizes, spec.strides, spec.offset).clone(at::MemoryFormat::Contiguous);
}

/// A storage's bytes as a 1-D tensor of `numel` elements of `dtype`; `bytes` must hold exactly that many.
at::Tensor storage_tensor(const void* bytes, size_t nbytes, at::ScalarType dtype, int64_t numel,
                          const std::string& key, const std::string& path) {
  const size_t element = c10::elementSize(dtype);
  TORCH_CHECK(numel >= 0 && static_cast<uint64_t>(numel) <= nbytes / element && nbytes % element == 0 &&
                  nbytes / element == static_cast<uint64_t>(numel),
              "attn::io: ", path, ": storage '", key, "' holds ", nbytes, " bytes, expected ", numel, " elements of ",
              c10::toString(dtype));
  at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(dtype));
  if (nbytes > 0) std::memcpy(t.data_ptr(), bytes, nbytes);
  return t;
}

/// The file's bytes for LibTorch's zip reader. Unlike LibTorch's own MemoryReadAdapter it never reads
/// outside the buffer: miniz asks for ranges a corrupt archive makes up, and gets a short read instead.
class BoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    const size_t count = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, count);
    return count;
  }

 private:
  const std::vector<uint8_t>& bytes_;
};

uint64_t le(const std::vector<uint8_t>& b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(b[at + i]) << (8 * i);
  return v;
}

/// Checks the zip's central directory before LibTorch's zip reader sees the file: every record stored
/// uncompressed (as torch.save writes them) and lying inside the file. A hostile archive could otherwise
/// declare a record of terabytes, which the reader would try to allocate.
void check_zip_layout(const std::vector<uint8_t>& b, const std::string& path) {
  const auto fail = [&](const std::string& why) { TORCH_CHECK(false, "attn::io: ", path, ": bad zip archive: ", why); };
  const size_t n = b.size();
  if (n < 22) fail("too short");
  // The end-of-central-directory record: the last "PK\5\6" within the final 64 KiB (its comment's limit).
  size_t eocd = std::string::npos;
  for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 0xFFFF;) {
    if (le(b, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) fail("no end-of-central-directory record");
  uint64_t entries = le(b, eocd + 10, 2), cd_size = le(b, eocd + 12, 4), cd_offset = le(b, eocd + 16, 4);
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    // ZIP64: the locator just before the EOCD points at the ZIP64 end record with the 8-byte values.
    if (eocd < 20 || le(b, eocd - 20, 4) != 0x07064b50) fail("ZIP64 locator missing");
    const uint64_t record = le(b, eocd - 20 + 8, 8);
    if (n < 56 || record > n - 56 || le(b, record, 4) != 0x06064b50) fail("ZIP64 end record missing");
    entries = le(b, record + 32, 8);
    cd_size = le(b, record + 40, 8);
    cd_offset = le(b, record + 48, 8);
  }
  if (cd_offset > n || cd_size > n - cd_offset || entries > cd_size / 46) fail("central directory outside the file");
  size_t at = cd_offset;
  bool compressed_record = false, torchscript = false;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > cd_offset + cd_size || le(b, at, 4) != 0x02014b50) fail("truncated central directory");
    const uint64_t method = le(b, at + 10, 2), name_len = le(b, at + 28, 2), extra_len = le(b, at + 30, 2),
                   comment_len = le(b, at + 32, 2);
    uint64_t compressed = le(b, at + 20, 4), size = le(b, at + 24, 4), local = le(b, at + 42, 4);
    const size_t extra = at + 46 + name_len;
    if (extra + extra_len + comment_len > cd_offset + cd_size) fail("truncated central directory entry");
    // ZIP64 extended information: 8-byte values for the fields that hold 0xFFFFFFFF, in this order.
    for (size_t x = extra; x + 4 <= extra + extra_len;) {
      const uint64_t id = le(b, x, 2), len = le(b, x + 2, 2);
      if (x + 4 + len > extra + extra_len) fail("truncated extra field");
      if (id == 0x0001) {
        size_t f = x + 4;
        for (uint64_t* field : {&size, &compressed, &local}) {
          if (*field == 0xFFFFFFFF) {
            if (f + 8 > x + 4 + len) fail("truncated ZIP64 field");
            *field = le(b, f, 8);
            f += 8;
          }
        }
      }
      x += 4 + len;
    }
    // torch.jit.save writes code/ and constants.pkl next to data.pkl (and compresses some records).
    const std::string name(reinterpret_cast<const char*>(b.data() + at + 46), name_len);
    torchscript = torchscript || name.find("/code/") != std::string::npos ||
                  (name.size() >= 14 && name.compare(name.size() - 14, 14, "/constants.pkl") == 0);
    compressed_record = compressed_record || method != 0 || compressed != size;
    if (local > n || compressed > n - local) fail("a record lies outside the file");  // its bytes as stored
    at = extra + extra_len + comment_len;
  }
  TORCH_CHECK(!torchscript, "attn::io: ", path, " is a TorchScript archive (torch.jit.save), which holds code ",
              "as well as weights; attn reads state_dicts. In Python, save the weights with ",
              "torch.save(model.state_dict(), path), or load the archive itself with torch::jit::load");
  if (compressed_record) fail("a record is compressed; torch.save stores records uncompressed");
}

}  // namespace

TensorMap read_torch_zip(const std::vector<uint8_t>& bytes, const std::string& path, std::vector<std::string>* skipped) {
  check_zip_layout(bytes, path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(std::make_shared<BoundedReader>(bytes));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "attn::io: ", path, ": not a readable torch.save zip archive: ", e.what_without_backtrace());
  }
  TORCH_CHECK(reader->hasRecord("data.pkl"), "attn::io: ", path, ": the zip archive has no data.pkl record");
  if (reader->hasRecord("byteorder")) {
    auto [data, size] = reader->getRecord("byteorder");
    const std::string order(static_cast<const char*>(data.get()), size);
    TORCH_CHECK(order == "little", "attn::io: ", path, ": byte order '", order, "' is not supported");
  }
  auto [pkl, pkl_size] = reader->getRecord("data.pkl");
  size_t pos = 0;
  const PickleRef root = read_pickle(static_cast<const uint8_t*>(pkl.get()), pkl_size, &pos, path);
  std::vector<std::pair<std::string, TensorSpec>> specs;
  std::vector<std::string> ignored;
  collect(root, "", specs, skipped ? *skipped : ignored, path);

  std::map<std::string, at::Tensor> storages;
  TensorMap out;
  for (const auto& [name, spec] : specs) {
    auto it = storages.find(spec.storage_key);
    if (it == storages.end()) {
      const std::string record = "data/" + spec.storage_key;
      TORCH_CHECK(reader->hasRecord(record), "attn::io: ", path, ": tensor '", name, "' refers to record '", record,
                  "', which the archive does not have");
      auto [data, size] = reader->getRecord(record);
      it = storages.emplace(spec.storage_key, storage_tensor(data.get(), size, spec.dtype, spec.storage_numel,
                                                             spec.storage_key, path))
               .first;
    }
    out[name] = materialise(name, spec, it->second, path);
  }
  return out;
}

TensorMap read_torch_legacy(const std::vector<uint8_t>& bytes, const std::string& path,
                            std::vector<std::string>* skipped) {
  size_t pos = 0;
  const uint8_t* data = bytes.data();
  const PickleRef magic = read_pickle(data, bytes.size(), &pos, path);
  // torch's legacy magic number 0x1950a86a20f9469cfc6c, as LONG1's little-endian bytes.
  static const std::string kMagic("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10);
  TORCH_CHECK(magic->kind == Kind::BigInt && magic->text == kMagic, "attn::io: ", path,
              ": not a torch.save file (the legacy format's magic number is missing)");
  const PickleRef protocol = read_pickle(data, bytes.size(), &pos, path);
  TORCH_CHECK(protocol->kind == Kind::Int && protocol->integer == 1001, "attn::io: ", path,
              ": unsupported legacy torch.save protocol");
  const PickleRef sys_info = read_pickle(data, bytes.size(), &pos, path);
  if (sys_info->kind == Kind::Dict) {
    for (const auto& [k, v] : sys_info->dict) {
      if (k->kind == Kind::String && k->text == "little_endian") {
        TORCH_CHECK(v->kind == Kind::Bool && v->boolean, "attn::io: ", path, ": big-endian files are not supported");
      }
    }
  }
  const PickleRef root = read_pickle(data, bytes.size(), &pos, path);
  const PickleRef keys = read_pickle(data, bytes.size(), &pos, path);
  TORCH_CHECK(keys->kind == Kind::List, "attn::io: ", path, ": the storage key list is missing");

  std::vector<std::pair<std::string, TensorSpec>> specs;
  std::vector<std::string> ignored;
  collect(root, "", specs, skipped ? *skipped : ignored, path);
  std::map<std::string, const TensorSpec*> wanted;  // storage key -> a spec naming its dtype and size
  for (const auto& [name, spec] : specs) wanted.emplace(spec.storage_key, &spec);

  std::map<std::string, at::Tensor> storages;
  for (const PickleRef& key : keys->items) {
    TORCH_CHECK(key->kind == Kind::String, "attn::io: ", path, ": a storage key is not a string");
    TORCH_CHECK(bytes.size() - pos >= 8, "attn::io: ", path, ": truncated before storage '", key->text, "'");
    uint64_t numel = 0;
    for (int i = 0; i < 8; ++i) numel |= static_cast<uint64_t>(data[pos + i]) << (8 * i);
    pos += 8;
    const auto it = wanted.find(key->text);
    TORCH_CHECK(it != wanted.end(), "attn::io: ", path, ": storage '", key->text, "' belongs to no tensor");
    const size_t element = c10::elementSize(it->second->dtype);
    TORCH_CHECK(numel <= (bytes.size() - pos) / element, "attn::io: ", path, ": storage '", key->text,
                "' declares ", numel, " elements but the file ends first");
    storages[key->text] = storage_tensor(data + pos, numel * element, it->second->dtype,
                                         static_cast<int64_t>(numel), key->text, path);
    pos += numel * element;
  }
  TensorMap out;
  for (const auto& [name, spec] : specs) {
    const auto it = storages.find(spec.storage_key);
    TORCH_CHECK(it != storages.end(), "attn::io: ", path, ": tensor '", name, "' refers to storage '",
                spec.storage_key, "', which the file does not contain");
    out[name] = materialise(name, spec, it->second, path);
  }
  return out;
}

std::string torch_zip_bytes(const TensorMap& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().to(at::kCPU).contiguous());
  // torch::pickle_save without its type tags: it marks the dict as Dict[str, Tensor] with a call to
  // torch.jit._pickle.restore_type_tag, which torch.load refuses under weights_only=True (PyTorch's default from
  // 2.6). Untagged, data.pkl is a plain dict of tensors, as torch.save writes a state_dict.
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(dict);
  pickler.stop();
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return bytes;
}

TensorMap read_torch_zip(const std::vector<uint8_t>& bytes, const std::string& path) {
  return read_torch_zip(bytes, path, nullptr);
}

TensorMap read_torch_legacy(const std::vector<uint8_t>& bytes, const std::string& path) {
  return read_torch_legacy(bytes, path, nullptr);
}

}  // namespace attn::io::detail
