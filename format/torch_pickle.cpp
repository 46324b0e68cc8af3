// torch_pickle.cpp: the restricted unpickler (read_torch_state_dict). Opcode meanings follow Python's
// pickletools documentation; only the subset that torch.save and save_pretrained emit is interpreted.
// Values live in one arena (objs_) and refer to each other by index, so shared and even recursive
// references cost nothing to destroy; a container may not change once it is placed in another one,
// which rules recursive structures out and keeps every container's recorded nesting height exact.
#include "format/torch_pickle.h"

#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include "format/error.h"
#include "format/shard_layout.h"

namespace tpshard {

namespace {

const char* kBadPickle =
    "the file is corrupt, truncated or not a PyTorch state dict: download it again, or re-save the weights with "
    "model.save_pretrained(dir, safe_serialization=True)";

enum class Kind : uint8_t { None, Bool, Int, BigInt, Float, Str, Bytes, Tuple, List, Dict, Global, Storage, Tensor };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "int beyond 64 bits";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Global: return "global";
    case Kind::Storage: return "storage";
    case Kind::Tensor: return "tensor";
  }
  return "?";
}

/// The callables and classes a state dict needs (Global objects hold one in Obj::i).
enum Fn : int64_t { kOrderedDict = 0, kRebuildTensorV2 = 1, kRebuildParameter = 2, kStorageType = 3 };

struct StorageType {
  const char* cls;  ///< torch.<cls>
  const char* dtype_str;
  uint32_t size;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", "F32", 4}, {"HalfStorage", "F16", 2},  {"BFloat16Storage", "BF16", 2}, {"DoubleStorage", "F64", 8},
    {"LongStorage", "I64", 8},  {"IntStorage", "I32", 4},   {"ShortStorage", "I16", 2},     {"CharStorage", "I8", 1},
    {"ByteStorage", "U8", 1},   {"BoolStorage", "BOOL", 1}};

/// One value. Strings and bytes stay in the pickle (offset i, length len).
struct Obj {
  Kind kind = Kind::None;
  bool placed = false;  ///< held by a tuple, list or dict (or given to a call): may no longer change
  uint8_t height = 0;   ///< containers: 1 + the largest height among their items; others 0
  uint32_t len = 0;     ///< Str / Bytes length; Global: storage type index
  int64_t i = 0;        ///< Bool / Int value, Float bits, Str / Bytes offset, Global Fn, Storage / Tensor index
  std::vector<uint32_t> items;  ///< Tuple / List items; Dict: key, value, key, value, ...
};

/// `s` for an error message: at most 100 bytes, bytes outside printable ASCII as \xNN.
std::string printable(std::string_view s) {
  std::string r;
  for (size_t k = 0; k < s.size() && k < 100; ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c < 0x7f) {
      r += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      r += "\\x";
      r += hex[c >> 4];
      r += hex[c & 15];
    }
  }
  if (s.size() > 100) r += "...";
  return r;
}

class Unpickler {
 public:
  Unpickler(const uint8_t* d, uint64_t n, const std::string& where) : d_(d), n_(n), where_(where) {}

  TorchStateDict run() {
    for (;;) {
      op_at_ = pos_;
      if (pos_ >= n_) fail("the pickle ends without STOP (truncated)");
      const uint8_t op = d_[pos_++];
      switch (op) {
        case 0x80: {  // PROTO
          const uint8_t v = read(1)[0];
          if (v < 2 || v > 5) fail("pickle protocol " + std::to_string(v) + " (torch.save writes 2; 2 to 5 are read)");
          break;
        }
        case 0x95: {  // FRAME: a length prefix over the next opcodes; the opcodes are read as they come
          const uint64_t len = layout::get_le<uint64_t>(read(8));
          if (len > n_ - pos_) fail("a frame of " + std::to_string(len) + " bytes runs past the end of the pickle (truncated)");
          break;
        }
        case 'c': {  // GLOBAL: "module\nname\n"
          const std::string_view module = line(), name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const uint32_t name = pop(), module = pop();
          if (objs_[module].kind != Kind::Str || objs_[name].kind != Kind::Str) fail("STACK_GLOBAL needs two strings");
          push(global(str(module), str(name)));
          break;
        }
        case 'Q': push(persistent_load(pop())); break;  // BINPERSID
        case 'q': memo_put(read(1)[0]); break;          // BINPUT
        case 'r': memo_put(layout::get_le<uint32_t>(read(4))); break;  // LONG_BINPUT
        case 0x94: memo_put(memo_count_); break;        // MEMOIZE
        case 'h': memo_get(read(1)[0]); break;          // BINGET
        case 'j': memo_get(layout::get_le<uint32_t>(read(4))); break;  // LONG_BINGET
        case '(':  // MARK
          if (marks_.size() >= static_cast<size_t>(kMaxPickleDepth))
            fail("more than " + std::to_string(kMaxPickleDepth) + " nested MARKs (limit)");
          marks_.push_back(stack_.size());
          break;
        case '}': push(make(Kind::Dict)); break;   // EMPTY_DICT
        case ']': push(make(Kind::List)); break;   // EMPTY_LIST
        case ')': push(make(Kind::Tuple)); break;  // EMPTY_TUPLE
        case 't': push(tuple(pop_mark())); break;  // TUPLE
        case 0x85: push(tuple(pop_n(1))); break;   // TUPLE1
        case 0x86: push(tuple(pop_n(2))); break;   // TUPLE2
        case 0x87: push(tuple(pop_n(3))); break;   // TUPLE3
        case 'J': push(integer(static_cast<int32_t>(layout::get_le<uint32_t>(read(4))))); break;  // BININT
        case 'K': push(integer(read(1)[0])); break;                                         // BININT1
        case 'M': push(integer(layout::get_le<uint16_t>(read(2)))); break;                  // BININT2
        case 0x8a: push(long1()); break;                                                     // LONG1
        case 'X': push(text(Kind::Str, layout::get_le<uint32_t>(read(4)))); break;          // BINUNICODE
        case 0x8c: push(text(Kind::Str, read(1)[0])); break;                                // SHORT_BINUNICODE
        case 0x8d: push(text(Kind::Str, layout::get_le<uint64_t>(read(8)))); break;         // BINUNICODE8
        case 'T': {                                                                          // BINSTRING
          const int32_t len = static_cast<int32_t>(layout::get_le<uint32_t>(read(4)));
          if (len < 0) fail("BINSTRING with a negative length");
          push(text(Kind::Str, static_cast<uint64_t>(len)));
          break;
        }
        case 'U': push(text(Kind::Str, read(1)[0])); break;                                 // SHORT_BINSTRING
        case 'B': push(text(Kind::Bytes, layout::get_le<uint32_t>(read(4)))); break;        // BINBYTES
        case 'C': push(text(Kind::Bytes, read(1)[0])); break;                               // SHORT_BINBYTES
        case 0x8e: push(text(Kind::Bytes, layout::get_le<uint64_t>(read(8)))); break;       // BINBYTES8
        case 'G': {  // BINFLOAT: big-endian IEEE double; kept as its bits
          const uint8_t* p = read(8);
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = bits << 8 | p[k];
          const uint32_t o = make(Kind::Float);
          objs_[o].i = static_cast<int64_t>(bits);
          push(o);
          break;
        }
        case 'N': push(make(Kind::None)); break;  // NONE
        case 0x88: push(boolean(true)); break;    // NEWTRUE
        case 0x89: push(boolean(false)); break;   // NEWFALSE
        case 'R': {  // REDUCE
          const uint32_t args = pop(), fn = pop();
          push(call(fn, args));
          break;
        }
        case 'b': {  // BUILD: state for the object below it; a dict's attributes (state_dict()._metadata) are dropped
          const uint32_t state = pop(), target = top();
          if (objs_[target].kind != Kind::Dict)
            fail("BUILD sets the state of a " + std::string(kind_name(objs_[target].kind)) + " (only a dict's attributes are accepted)");
          check_changeable(target);
          objs_[state].placed = true;
          break;
        }
        case 's': {  // SETITEM
          const uint32_t v = pop(), k = pop();
          const uint32_t dict = container(top(), Kind::Dict, "SETITEM");
          place(dict, k);
          place(dict, v);
          break;
        }
        case 'u': {  // SETITEMS
          const std::vector<uint32_t> kv = pop_mark();
          if (kv.size() % 2) fail("SETITEMS with an odd number of values");
          const uint32_t dict = container(top(), Kind::Dict, "SETITEMS");
          for (const uint32_t x : kv) place(dict, x);
          break;
        }
        case 'a': {  // APPEND
          const uint32_t v = pop();
          place(container(top(), Kind::List, "APPEND"), v);
          break;
        }
        case 'e': {  // APPENDS
          const std::vector<uint32_t> xs = pop_mark();
          const uint32_t list = container(top(), Kind::List, "APPENDS");
          for (const uint32_t x : xs) place(list, x);
          break;
        }
        case '.':  // STOP
          return result(pop());
        default: {
          static const char* hex = "0123456789abcdef";
          fail(std::string("opcode 0x") + hex[op >> 4] + hex[op & 15] +
               " is not one that torch.save emits for a state dict (restricted unpickler)");
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(where_ + ": " + what + " (at byte " + std::to_string(op_at_) + ")", kBadPickle);
  }

  /// The next n bytes (checked against the bytes left), advancing past them.
  const uint8_t* read(uint64_t n) {
    if (n > n_ - pos_)
      fail("needs " + std::to_string(n) + " bytes, " + std::to_string(n_ - pos_) + " are left (truncated or a bad length)");
    const uint8_t* p = d_ + pos_;
    pos_ += n;
    return p;
  }

  /// The bytes up to the next '\n' (GLOBAL's arguments).
  std::string_view line() {
    const void* nl = std::memchr(d_ + pos_, '\n', static_cast<size_t>(n_ - pos_));
    if (!nl) fail("GLOBAL without a newline-terminated name (truncated)");
    const uint64_t len = static_cast<uint64_t>(static_cast<const uint8_t*>(nl) - (d_ + pos_));
    const std::string_view s(reinterpret_cast<const char*>(d_ + pos_), static_cast<size_t>(len));
    pos_ += len + 1;
    return s;
  }

  uint32_t make(Kind k) {
    if (objs_.size() >= kMaxPickleObjects) fail("more than " + std::to_string(kMaxPickleObjects) + " values (limit)");
    objs_.emplace_back();
    objs_.back().kind = k;
    if (k == Kind::Tuple || k == Kind::List || k == Kind::Dict) objs_.back().height = 1;
    return static_cast<uint32_t>(objs_.size() - 1);
  }
  uint32_t integer(int64_t v) {
    const uint32_t o = make(Kind::Int);
    objs_[o].i = v;
    return o;
  }
  uint32_t boolean(bool v) {
    const uint32_t o = make(Kind::Bool);
    objs_[o].i = v;
    return o;
  }
  /// LONG1: a length byte, then that many bytes of little-endian two's complement.
  uint32_t long1() {
    const uint8_t len = read(1)[0];
    const uint8_t* p = read(len);
    if (len > 8) return make(Kind::BigInt);
    uint64_t v = 0;
    for (int k = len - 1; k >= 0; --k) v = v << 8 | p[k];
    if (len && len < 8 && (p[len - 1] & 0x80)) v |= ~uint64_t{0} << (8 * len);  // sign-extend
    return integer(static_cast<int64_t>(v));
  }
  uint32_t text(Kind k, uint64_t len) {
    const uint64_t at = pos_;
    read(len);
    if (len > UINT32_MAX) fail("a string of " + std::to_string(len) + " bytes (limit 4 GiB)");
    const uint32_t o = make(k);
    objs_[o].i = static_cast<int64_t>(at);
    objs_[o].len = static_cast<uint32_t>(len);
    return o;
  }
  std::string_view str(uint32_t o) const {
    return {reinterpret_cast<const char*>(d_ + objs_[o].i), objs_[o].len};
  }

  void push(uint32_t o) {
    if (stack_.size() >= kMaxPickleStack) fail("more than " + std::to_string(kMaxPickleStack) + " values on the stack (limit)");
    stack_.push_back(o);
  }
  /// The stack's bottom above the innermost MARK: values below it are not reachable.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  uint32_t top() const {
    if (stack_.size() <= floor()) fail("an opcode needs a value but the stack is empty");
    return stack_.back();
  }
  uint32_t pop() {
    const uint32_t o = top();
    stack_.pop_back();
    return o;
  }
  std::vector<uint32_t> pop_n(size_t n) {
    if (stack_.size() - floor() < n) fail("an opcode needs " + std::to_string(n) + " values, the stack holds fewer");
    std::vector<uint32_t> r(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return r;
  }
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK, none is open");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> r(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return r;
  }

  void memo_put(uint64_t idx) {
    if (idx >= kMaxPickleMemo) fail("memo index " + std::to_string(idx) + " is beyond the limit of " + std::to_string(kMaxPickleMemo));
    const uint32_t o = top();
    if (idx >= memo_.size()) memo_.resize(static_cast<size_t>(idx) + 1, UINT32_MAX);
    if (memo_[idx] == UINT32_MAX) ++memo_count_;
    memo_[idx] = o;
  }
  void memo_get(uint64_t idx) {
    if (idx >= memo_.size() || memo_[idx] == UINT32_MAX) fail("memo entry " + std::to_string(idx) + " is read before it is written");
    push(memo_[idx]);
  }

  void check_changeable(uint32_t c) const {
    if (objs_[c].placed)
      fail("a " + std::string(kind_name(objs_[c].kind)) +
           " is changed after it was placed in another value (a recursive or self-referencing structure)");
  }
  uint32_t container(uint32_t o, Kind k, const char* op) const {
    if (objs_[o].kind != k) fail(std::string(op) + " on a " + kind_name(objs_[o].kind) + ", not a " + kind_name(k));
    return o;
  }
  /// Adds item to container c (a tuple being built, a list or a dict).
  void place(uint32_t c, uint32_t item) {
    check_changeable(c);
    if (item == c) fail("a " + std::string(kind_name(objs_[c].kind)) + " contains itself (a recursive structure)");
    if (++items_ > kMaxPickleItems) fail("more than " + std::to_string(kMaxPickleItems) + " items in containers (limit)");
    Obj& it = objs_[item];
    it.placed = true;
    if (it.height + 1 > objs_[c].height) {
      if (it.height + 1 > kMaxPickleDepth) fail("values nested deeper than " + std::to_string(kMaxPickleDepth) + " levels (limit)");
      objs_[c].height = static_cast<uint8_t>(it.height + 1);
    }
    objs_[c].items.push_back(item);
  }
  uint32_t tuple(const std::vector<uint32_t>& xs) {
    const uint32_t t = make(Kind::Tuple);
    for (const uint32_t x : xs) place(t, x);
    return t;
  }

  /// GLOBAL / STACK_GLOBAL: one of the allowed names, else the refusal.
  uint32_t global(std::string_view module, std::string_view name) {
    int64_t fn = -1;
    uint32_t type = 0;
    if (module == "collections" && name == "OrderedDict") fn = kOrderedDict;
    if (module == "torch._utils" && name == "_rebuild_tensor_v2") fn = kRebuildTensorV2;
    if (module == "torch._utils" && name == "_rebuild_parameter") fn = kRebuildParameter;
    if (module == "torch")
      for (uint32_t k = 0; k < sizeof kStorageTypes / sizeof kStorageTypes[0]; ++k)
        if (name == kStorageTypes[k].cls) fn = kStorageType, type = k;
    if (fn < 0)
      throw Error(where_ + ": refuses the global " + printable(module) + "." + printable(name) + " (at byte " +
                      std::to_string(op_at_) +
                      "): a state dict of tensors needs only collections.OrderedDict, torch._utils._rebuild_tensor_v2 / "
                      "_rebuild_parameter and torch.<T>Storage; tpshard imports and runs nothing from a checkpoint",
                  "this file is not a plain state dict (it may run code when loaded with torch.load): if you trust its "
                  "source, load the model in Python and re-save the weights with model.save_pretrained(dir, "
                  "safe_serialization=True); otherwise delete it");
    const uint32_t o = make(Kind::Global);
    objs_[o].i = fn;
    objs_[o].len = type;
    return o;
  }

  /// BINPERSID: ('storage', torch.<T>Storage, key, location, numel) -> a storage (one per key).
  uint32_t persistent_load(uint32_t pid) {
    const Obj& t = objs_[pid];
    auto is = [&](size_t k, Kind kind) { return objs_[t.items[k]].kind == kind; };
    if (t.kind != Kind::Tuple || t.items.size() != 5 || !is(0, Kind::Str) || str(t.items[0]) != "storage" ||
        !is(1, Kind::Global) || objs_[t.items[1]].i != kStorageType || !is(2, Kind::Str) || !is(3, Kind::Str) ||
        !is(4, Kind::Int) || objs_[t.items[4]].i < 0)
      fail("a persistent id that is not ('storage', torch.<T>Storage, key, location, numel)");
    const StorageType& st = kStorageTypes[objs_[t.items[1]].len];
    const std::string key(str(t.items[2]));
    const uint64_t numel = static_cast<uint64_t>(objs_[t.items[4]].i);
    auto [it, fresh] = storage_index_.emplace(key, out_.storages.size());
    if (fresh) {
      TorchStorage s;
      s.key = key;
      s.dtype_str = st.dtype_str;
      s.element_size = st.size;
      s.dtype_supported = s.dtype_str == "F32" || s.dtype_str == "F16" || s.dtype_str == "BF16";
      if (s.dtype_supported) s.dtype = dtype_from_string(s.dtype_str);
      s.numel = numel;
      out_.storages.push_back(std::move(s));
    } else {
      const TorchStorage& s = out_.storages[it->second];
      if (s.dtype_str != st.dtype_str || s.numel != numel)
        fail("storage '" + printable(key) + "' is named as " + s.dtype_str + " x " + std::to_string(s.numel) + " and as " +
             st.dtype_str + " x " + std::to_string(numel));
    }
    const uint32_t o = make(Kind::Storage);
    objs_[o].i = static_cast<int64_t>(it->second);
    return o;
  }

  /// A tuple of non-negative ints (sizes) or of ints (strides), at most kMaxTensorRank of them.
  std::vector<int64_t> ints(uint32_t tup, bool non_negative, const char* what) {
    const Obj& t = objs_[tup];
    if (t.kind != Kind::Tuple) fail(std::string("_rebuild_tensor_v2's ") + what + " is a " + kind_name(t.kind) + ", not a tuple");
    if (t.items.size() > static_cast<size_t>(kMaxTensorRank))
      fail("a tensor of " + std::to_string(t.items.size()) + " dimensions (limit " + std::to_string(kMaxTensorRank) + ")");
    std::vector<int64_t> r;
    for (const uint32_t x : t.items) {
      if (objs_[x].kind != Kind::Int || (non_negative && objs_[x].i < 0))
        fail(std::string("_rebuild_tensor_v2's ") + what + " hold a value that is not " + (non_negative ? "a non-negative int" : "an int"));
      r.push_back(objs_[x].i);
    }
    return r;
  }

  /// REDUCE: calls one of the allowed functions (by interpreting it, never by running anything).
  uint32_t call(uint32_t fn, uint32_t args) {
    if (objs_[fn].kind != Kind::Global) fail("REDUCE calls a " + std::string(kind_name(objs_[fn].kind)) + ", not an allowed global");
    if (objs_[args].kind != Kind::Tuple) fail("REDUCE with arguments that are not a tuple");
    objs_[args].placed = true;
    const std::vector<uint32_t> a = objs_[args].items;
    auto kind = [&](size_t k) { return objs_[a[k]].kind; };
    switch (objs_[fn].i) {
      case kOrderedDict:
        if (!a.empty()) fail("collections.OrderedDict called with arguments (torch.save calls it with none)");
        return make(Kind::Dict);
      case kRebuildTensorV2: {
        // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
        if ((a.size() != 6 && a.size() != 7) || kind(0) != Kind::Storage || kind(1) != Kind::Int || objs_[a[1]].i < 0 ||
            kind(4) != Kind::Bool || kind(5) != Kind::Dict || (a.size() == 7 && kind(6) != Kind::None && kind(6) != Kind::Dict))
          fail("torch._utils._rebuild_tensor_v2 called with arguments other than (storage, storage_offset, size, stride, "
               "requires_grad, backward_hooks[, metadata])");
        if (tensors_.size() >= kMaxPickleTensors) fail("more than " + std::to_string(kMaxPickleTensors) + " tensors (limit)");
        TorchTensorRef t;
        t.storage = static_cast<size_t>(objs_[a[0]].i);
        t.storage_offset = static_cast<uint64_t>(objs_[a[1]].i);
        t.shape = ints(a[2], true, "size");
        t.stride = ints(a[3], false, "stride");
        if (t.shape.size() != t.stride.size())
          fail("a tensor with " + std::to_string(t.shape.size()) + " sizes and " + std::to_string(t.stride.size()) + " strides");
        tensors_.push_back(std::move(t));
        const uint32_t o = make(Kind::Tensor);
        objs_[o].i = static_cast<int64_t>(tensors_.size() - 1);
        return o;
      }
      case kRebuildParameter:  // (data, requires_grad, backward_hooks): the tensor itself
        if (a.size() != 3 || kind(0) != Kind::Tensor || kind(1) != Kind::Bool || kind(2) != Kind::Dict)
          fail("torch._utils._rebuild_parameter called with arguments other than (tensor, requires_grad, backward_hooks)");
        return a[0];
      default:
        fail("REDUCE calls torch." + std::string(kStorageTypes[objs_[fn].len].cls) + ", which torch.save never calls");
    }
  }

  /// STOP's value: the state dict.
  TorchStateDict result(uint32_t top_value) {
    const Obj& d = objs_[top_value];
    if (d.kind != Kind::Dict)
      fail("the pickle holds a " + std::string(kind_name(d.kind)) + ", not a state dict {name: tensor}");
    std::set<std::string_view> seen;
    for (size_t k = 0; k + 1 < d.items.size(); k += 2) {
      const Obj& key = objs_[d.items[k]];
      if (key.kind != Kind::Str) fail("a state dict key is a " + std::string(kind_name(key.kind)) + ", not a string");
      const std::string_view name = str(d.items[k]);
      if (!seen.insert(name).second) fail("the state dict lists '" + printable(name) + "' twice");
      const Obj& v = objs_[d.items[k + 1]];
      if (v.kind != Kind::Tensor)
        fail("the value of '" + printable(name) + "' is a " + kind_name(v.kind) + ", not a tensor (not a plain state dict)");
      if (out_.tensors.size() >= kMaxPickleTensors) fail("more than " + std::to_string(kMaxPickleTensors) + " tensors (limit)");
      TorchTensorRef t = tensors_[static_cast<size_t>(v.i)];
      t.name = std::string(name);
      out_.tensors.push_back(std::move(t));
    }
    return std::move(out_);
  }

  const uint8_t* d_;
  uint64_t n_;
  const std::string& where_;
  uint64_t pos_ = 0, op_at_ = 0;
  std::vector<Obj> objs_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::vector<uint32_t> memo_;
  uint64_t memo_count_ = 0, items_ = 0;
  std::vector<TorchTensorRef> tensors_;  ///< every tensor rebuilt, unnamed (the dict names them)
  std::map<std::string, size_t> storage_index_;
  TorchStateDict out_;
};

}  // namespace

TorchStateDict read_torch_state_dict(const uint8_t* data, uint64_t size, const std::string& where) {
  return Unpickler(data, size, where).run();
}

}  // namespace tpshard
