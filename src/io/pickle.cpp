#include "io/pickle.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <limits>

namespace attn::io::detail {
namespace {

// Limits that no weight file of an attention module comes near, and that keep hostile input from making the
// reader allocate or recurse without bound.
constexpr size_t kMaxStack = 1 << 20;
constexpr size_t kMaxMemo = 1 << 20;
constexpr size_t kMaxDims = 64;
// Containers nested deeper than this are refused: the values are freed recursively.
constexpr int kMaxDepth = 1000;

using Kind = PickleValue::Kind;

PickleRef make(Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, size_t pos, const std::string& what)
      : data_(data), size_(size), pos_(pos), what_(what) {}

  PickleRef run(size_t* end);

 private:
  [[noreturn]] void fail(const std::string& message) const {
    TORCH_CHECK(false, "attn::io: ", what_, ": malformed pickle at byte ", pos_, ": ", message);
  }
  void need(size_t n) const {
    if (n > size_ - pos_) fail("truncated (needs " + std::to_string(n) + " more bytes)");
  }
  uint8_t byte() {
    need(1);
    return data_[pos_++];
  }
  uint64_t little_endian(size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string bytes(size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string line() {
    const size_t start = pos_;
    while (pos_ < size_ && data_[pos_] != '\n') ++pos_;
    if (pos_ >= size_) fail("unterminated line");
    std::string s(reinterpret_cast<const char*>(data_ + start), pos_ - start);
    ++pos_;
    return s;
  }

  void push(PickleRef v) {
    if (stack_.size() >= kMaxStack) fail("stack too deep");
    stack_.push_back(std::move(v));
  }
  PickleRef pop() {
    if (stack_.empty() || stack_.back()->kind == Kind::Mark) fail("stack underflow");
    PickleRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  PickleRef& top() {
    if (stack_.empty() || stack_.back()->kind == Kind::Mark) fail("stack underflow");
    return stack_.back();
  }
  /// The items above the topmost MARK, which is removed.
  std::vector<PickleRef> pop_to_mark() {
    size_t mark = stack_.size();
    while (mark > 0 && stack_[mark - 1]->kind != Kind::Mark) --mark;
    if (mark == 0) fail("no MARK on the stack");
    std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark - 1);
    return items;
  }
  void memo_put(size_t index) {
    if (index >= kMaxMemo) fail("memo index too large");
    if (memo_.size() <= index) memo_.resize(index + 1);
    memo_[index] = top();
  }
  PickleRef memo_get(size_t index) {
    if (index >= memo_.size() || !memo_[index]) fail("memo entry " + std::to_string(index) + " was never set");
    // A dict or list fetched again could be inserted into itself (a reference cycle: leaked memory and
    // unbounded recursion). State dicts never share one, so a weight file may not.
    const Kind kind = memo_[index]->kind;
    if (kind == Kind::Dict || kind == Kind::List) fail("a dict or list referenced twice is not supported");
    return memo_[index];
  }
  /// Records that `child` now sits inside `parent`, refusing nesting deeper than kMaxDepth.
  void nest(PickleValue& parent, const PickleValue& child) {
    parent.depth = std::max(parent.depth, child.depth + 1);
    if (parent.depth > kMaxDepth) fail("containers nested deeper than " + std::to_string(kMaxDepth));
  }
  PickleRef tuple(std::vector<PickleRef> items) {
    PickleRef t = make(Kind::Tuple);
    for (const auto& item : items) nest(*t, *item);
    t->items = std::move(items);
    return t;
  }
  PickleRef global(const std::string& module, const std::string& name);
  PickleRef reduce(const PickleRef& callable, const PickleRef& args);
  PickleRef persistent(const PickleRef& pid);
  void set_items(PickleRef& dict, const std::vector<PickleRef>& items);
  std::vector<int64_t> int_tuple(const PickleRef& v, const char* field);

  const uint8_t* data_;
  size_t size_, pos_;
  const std::string& what_;
  std::vector<PickleRef> stack_;
  std::vector<PickleRef> memo_;
};

PickleRef Reader::global(const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  static const char* const allowed[] = {
      "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor",
      "torch._utils._rebuild_parameter", "torch.jit._pickle.restore_type_tag",
  };
  bool ok = module == "torch" && name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0;
  for (const char* a : allowed) ok = ok || full == a;
  // Not malformed, just not data: torch.save(model) pickles the module's class (and whatever else a pickle
  // can call), which would run code on load.
  TORCH_CHECK(ok, "attn::io: ", what_, ": refusing to load '", full, "': the file holds a pickled Python object, ",
              "not only tensors and dicts of them (torch.save(model) pickles the whole module, and loading it would ",
              "run code). In Python, save the weights with torch.save(model.state_dict(), path)");
  PickleRef g = make(Kind::Global);
  g->text = full;
  return g;
}

std::vector<int64_t> Reader::int_tuple(const PickleRef& v, const char* field) {
  if (v->kind != Kind::Tuple && v->kind != Kind::List) fail(std::string(field) + " is not a tuple");
  if (v->items.size() > kMaxDims) fail(std::string(field) + " has too many dimensions");
  std::vector<int64_t> out;
  for (const auto& item : v->items) {
    if (item->kind != Kind::Int || item->integer < 0) fail(std::string(field) + " holds a non-integer or negative");
    out.push_back(item->integer);
  }
  return out;
}

PickleRef Reader::reduce(const PickleRef& callable, const PickleRef& args) {
  if (callable->kind != Kind::Global || args->kind != Kind::Tuple) fail("REDUCE of something not callable");
  const std::string& fn = callable->text;
  const auto& a = args->items;
  if (fn == "collections.OrderedDict") {
    if (!a.empty()) fail("OrderedDict with arguments");
    return make(Kind::Dict);
  }
  if (fn == "torch._utils._rebuild_tensor_v2" || fn == "torch._utils._rebuild_tensor") {
    if (a.size() < 4 || a[0]->kind != Kind::Storage || a[1]->kind != Kind::Int) fail("bad tensor record");
    PickleRef t = make(Kind::Tensor);
    t->tensor = a[0]->tensor;  // key, dtype, numel
    t->tensor.offset = a[1]->integer;
    t->tensor.sizes = int_tuple(a[2], "tensor size");
    t->tensor.strides = int_tuple(a[3], "tensor stride");
    if (t->tensor.sizes.size() != t->tensor.strides.size()) fail("tensor size and stride differ in rank");
    return t;
  }
  if (fn == "torch.jit._pickle.restore_type_tag") {  // LibTorch's pickler tags typed dicts: (value, "Dict[..]")
    if (a.size() != 2) fail("bad type tag record");
    return a[0];
  }
  if (fn == "torch._utils._rebuild_parameter") {
    if (a.empty() || a[0]->kind != Kind::Tensor) fail("bad parameter record");
    return a[0];
  }
  fail("cannot call '" + fn + "'");
}

PickleRef Reader::persistent(const PickleRef& pid) {
  // ('storage', storage_class, key, location, numel[, view_metadata])
  if (pid->kind != Kind::Tuple || pid->items.size() < 5) fail("persistent id is not a storage record");
  const auto& p = pid->items;
  if (p[0]->kind != Kind::String || p[0]->text != "storage") fail("persistent id is not a storage record");
  if (p[1]->kind != Kind::Global) fail("storage record without a storage class");
  if (p[2]->kind != Kind::String || p[4]->kind != Kind::Int || p[4]->integer < 0) fail("bad storage record");
  PickleRef s = make(Kind::Storage);
  s->tensor.storage_key = p[2]->text;
  s->tensor.dtype = storage_dtype(p[1]->text, what_);
  s->tensor.storage_numel = p[4]->integer;
  return s;
}

void Reader::set_items(PickleRef& dict, const std::vector<PickleRef>& items) {
  if (dict->kind != Kind::Dict) fail("SETITEM on a " + std::string(dict->kind_name()));
  if (items.size() % 2 != 0) fail("odd number of dict items");
  for (size_t i = 0; i < items.size(); i += 2) {
    nest(*dict, *items[i]);
    nest(*dict, *items[i + 1]);
    dict->dict.emplace_back(items[i], items[i + 1]);
  }
}

PickleRef Reader::run(size_t* end) {
  for (;;) {
    const uint8_t op = byte();
    switch (op) {
      case 0x80: byte(); break;  // PROTO n
      case '.': {                // STOP
        PickleRef result = pop();
        if (!stack_.empty()) fail("values left on the stack at STOP");
        *end = pos_;
        return result;
      }
      case '(': push(make(Kind::Mark)); break;
      case 'N': push(make(Kind::None)); break;
      case 0x88: case 0x89: {  // NEWTRUE, NEWFALSE
        PickleRef b = make(Kind::Bool);
        b->boolean = op == 0x88;
        push(b);
        break;
      }
      case 'J': case 'K': case 'M': {  // BININT (int32), BININT1, BININT2
        PickleRef i = make(Kind::Int);
        if (op == 'J') i->integer = static_cast<int32_t>(little_endian(4));
        else i->integer = static_cast<int64_t>(little_endian(op == 'K' ? 1 : 2));
        push(i);
        break;
      }
      case 0x8a: {  // LONG1: n bytes, two's complement little-endian
        const size_t n = byte();
        if (n > 8) {  // kept as bytes: only the legacy format's magic number is this wide
          PickleRef big = make(Kind::BigInt);
          big->text = bytes(n);
          push(big);
          break;
        }
        uint64_t v = n ? little_endian(n) : 0;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        PickleRef i = make(Kind::Int);
        i->integer = static_cast<int64_t>(v);
        push(i);
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | data_[pos_ + i];
        pos_ += 8;
        PickleRef f = make(Kind::Float);
        std::memcpy(&f->real, &bits, sizeof bits);
        push(f);
        break;
      }
      case 'X': case 0x8c: case 'U': case 'T': case 'B': case 'C': {  // strings and bytes
        const size_t n = (op == 0x8c || op == 'U' || op == 'C') ? byte() : static_cast<size_t>(little_endian(4));
        PickleRef s = make(op == 'B' || op == 'C' ? Kind::Bytes : Kind::String);
        s->text = bytes(n);
        push(s);
        break;
      }
      case ')': push(tuple({})); break;
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        const size_t n = op - 0x84u;
        if (stack_.size() < n) fail("stack underflow");
        std::vector<PickleRef> items;
        for (size_t i = 0; i < n; ++i) items.insert(items.begin(), pop());
        push(tuple(std::move(items)));
        break;
      }
      case 't': push(tuple(pop_to_mark())); break;
      case ']': push(make(Kind::List)); break;
      case 'l': {
        PickleRef l = make(Kind::List);
        l->items = pop_to_mark();
        for (const auto& item : l->items) nest(*l, *item);
        push(l);
        break;
      }
      case '}': push(make(Kind::Dict)); break;
      case 'd': {
        PickleRef d = make(Kind::Dict);
        set_items(d, pop_to_mark());
        push(d);
        break;
      }
      case 'a': {  // APPEND
        PickleRef v = pop();
        if (top()->kind != Kind::List) fail("APPEND to a non-list");
        nest(*top(), *v);
        top()->items.push_back(v);
        break;
      }
      case 'e': {  // APPENDS
        std::vector<PickleRef> items = pop_to_mark();
        if (top()->kind != Kind::List) fail("APPENDS to a non-list");
        for (auto& v : items) {
          nest(*top(), *v);
          top()->items.push_back(v);
        }
        break;
      }
      case 's': {  // SETITEM
        PickleRef value = pop(), key = pop();
        set_items(top(), {key, value});
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<PickleRef> items = pop_to_mark();
        set_items(top(), items);
        break;
      }
      case 'q': memo_put(byte()); break;                                      // BINPUT
      case 'r': memo_put(static_cast<size_t>(little_endian(4))); break;      // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); break;                               // MEMOIZE
      case 'h': push(memo_get(byte())); break;                                // BINGET
      case 'j': push(memo_get(static_cast<size_t>(little_endian(4)))); break;  // LONG_BINGET
      case 'c': {  // GLOBAL module\nname\n
        const std::string module = line();
        const std::string name = line();
        push(global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        PickleRef name = pop(), module = pop();
        if (name->kind != Kind::String || module->kind != Kind::String) fail("STACK_GLOBAL of non-strings");
        push(global(module->text, name->text));
        break;
      }
      case 'R': {  // REDUCE
        PickleRef args = pop(), callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 0x81: {  // NEWOBJ: only OrderedDict is allowed to be instantiated
        PickleRef args = pop(), cls = pop();
        push(reduce(cls, args));
        break;
      }
      case 'b': {  // BUILD: state for the object below. A state_dict's OrderedDict gets its _metadata here,
        pop();     // which only records module versions; tensors carry no state.
        if (top()->kind != Kind::Dict && top()->kind != Kind::Tensor) fail("BUILD on a " + std::string(top()->kind_name()));
        break;
      }
      case 'Q': push(persistent(pop())); break;  // BINPERSID
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        fail(std::string("unsupported opcode ") + hex);
      }
    }
  }
}

}  // namespace

const char* PickleValue::kind_name() const {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Global: return "global";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
    case Kind::Mark: return "mark";
  }
  return "?";
}

at::ScalarType storage_dtype(const std::string& global, const std::string& what) {
  static const std::pair<const char*, at::ScalarType> types[] = {
      {"torch.FloatStorage", at::kFloat},   {"torch.DoubleStorage", at::kDouble}, {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16}, {"torch.LongStorage", at::kLong}, {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},   {"torch.CharStorage", at::kChar},     {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},
  };
  for (const auto& [name, dtype] : types) {
    if (global == name) return dtype;
  }
  TORCH_CHECK(false, "attn::io: ", what, ": unsupported storage type '", global, "'");
}

PickleRef read_pickle(const uint8_t* data, size_t size, size_t* pos, const std::string& what) {
  TORCH_CHECK(*pos <= size, "attn::io: ", what, ": no pickle at byte ", *pos);
  Reader reader(data, size, *pos, what);
  return reader.run(pos);
}

}  // namespace attn::io::detail
