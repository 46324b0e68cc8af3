// torch_pickle.h: a restricted unpickler for the data.pkl of a torch.save archive holding a state dict:
// {name: tensor} (dict or collections.OrderedDict), each tensor rebuilt by torch._utils._rebuild_tensor_v2
// (or wrapped by _rebuild_parameter) from a storage that a persistent id names. It interprets the pickle
// opcodes of protocols 2-5 that torch.save emits and imports nothing: the only globals accepted are
// collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and the typed
// storage classes torch.<T>Storage; any other global is refused by name, and nothing is ever called.
// Input is untrusted: every length is checked against the bytes left, and the limits below bound the
// memory and work of any input. Does not own: the zip archive or the storages' bytes (torch_checkpoint.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace tpshard {

// Limits of the restricted unpickler (an input beyond one is refused, naming the limit).
constexpr uint64_t kMaxPickleObjects = 4000000;   ///< values created (a state dict needs about 20 per tensor)
constexpr uint64_t kMaxPickleItems = 16000000;    ///< items placed in tuples, lists and dicts, in all
constexpr uint64_t kMaxPickleStack = 1000000;     ///< values on the stack at once
constexpr uint64_t kMaxPickleMemo = 1000000;      ///< memo index (BINPUT / LONG_BINPUT / MEMOIZE)
constexpr int kMaxPickleDepth = 100;              ///< open MARKs, and nesting of tuples, lists and dicts
constexpr uint64_t kMaxPickleTensors = 1000000;   ///< tensors in one state dict
constexpr int kMaxTensorRank = 32;                ///< dimensions of one tensor

/// One storage that the pickle names by persistent id ('storage', torch.<T>Storage, key, location, numel).
struct TorchStorage {
  std::string key;          ///< its bytes are the archive entry <top>/data/<key>
  std::string dtype_str;    ///< safetensors' spelling of the storage's element type: "F32", "BF16", "I64", "BOOL", ...
  uint32_t element_size = 0;///< bytes per element
  bool dtype_supported = false;  ///< F32 / F16 / BF16
  DType dtype = DType::F32;      ///< valid when dtype_supported
  uint64_t numel = 0;       ///< elements in the storage
};

/// One entry of the state dict: a view of `shape` / `stride` (in elements) into storage `storage`,
/// starting `storage_offset` elements into it. Nothing here is checked against the archive yet.
struct TorchTensorRef {
  std::string name;
  size_t storage = 0;       ///< index into TorchStateDict::storages
  uint64_t storage_offset = 0;
  std::vector<int64_t> shape;   ///< sizes, each >= 0
  std::vector<int64_t> stride;  ///< as many as shape
};

/// What a torch.save'd state dict holds. Tensors in the pickle's order; storages each listed once (tied
/// weights share one).
struct TorchStateDict {
  std::vector<TorchStorage> storages;
  std::vector<TorchTensorRef> tensors;
};

/// Interprets `size` bytes of pickle at `data`. `where` names the pickle in errors (e.g.
/// "model/pytorch_model.bin: archive/data.pkl"). Throws Error naming `where`, and the byte offset where
/// it applies, for: an opcode outside the supported set, a global not in the allowed set (named as
/// module.name), a length past the end of the pickle, a pickle that ends without STOP, a limit above
/// exceeded, a container changed after it was placed in another (recursive structures), a call with
/// arguments its function never gets from torch.save, a storage key named with two different types or
/// sizes, a top-level value that is not a dict, a key that is not a string or appears twice, and a value
/// that is not a tensor.
TorchStateDict read_torch_state_dict(const uint8_t* data, uint64_t size, const std::string& where);

}  // namespace tpshard
