// torch_checkpoint.cpp: TorchCheckpointFile: the zip directory, data.pkl through the restricted
// unpickler, then every tensor checked against its storage entry.
#include "format/torch_checkpoint.h"

#include <cstring>

#include "format/error.h"
#include "format/shard_layout.h"
#include "format/torch_pickle.h"
#include "format/zip_archive.h"

namespace tpshard {

namespace {

const char* kResave =
    "re-save it in the current format: in Python, torch.save(torch.load(path), path) writes PyTorch's zip format "
    "(the default since 1.6), or model.save_pretrained(dir, safe_serialization=True) writes safetensors";
const char* kCorrupt = "the file is corrupt or truncated: download it again";

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// Refuses a file that is not a zip archive, naming what it is when that is recognisable.
void check_zip_magic(const std::string& path, const uint8_t* d, uint64_t n) {
  if (n >= 4 && (std::memcmp(d, "PK\x03\x04", 4) == 0 || std::memcmp(d, "PK\x05\x06", 4) == 0)) return;
  if (n >= 2 && d[0] == 0x80 && d[1] <= 5)
    throw Error(path + ": PyTorch's legacy serialization format (before 1.6: a bare pickle stream, not a zip archive) "
                       "is not read",
                kResave);
  if (n >= 262 && std::memcmp(d + 257, "ustar", 5) == 0)
    throw Error(path + ": PyTorch's legacy tar serialization format is not read", kResave);
  throw Error(path + ": not a zip archive (a PyTorch checkpoint saved by torch.save since 1.6 is one)",
              "check that the file is a complete PyTorch checkpoint (download it again), or " + std::string(kResave));
}

/// The archive's top folder: the X of the one entry named X/data.pkl.
std::string top_folder(const ZipArchive& zip) {
  std::string top;
  int found = 0;
  for (const ZipEntry& e : zip.entries()) {
    const size_t slash = e.name.find('/');
    if (slash == std::string::npos || e.name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
    if (++found == 1) top = e.name.substr(0, slash);
  }
  if (found == 0)
    throw Error(zip.path() + ": the zip archive has no <folder>/data.pkl: not a torch.save checkpoint (a TorchScript "
                             "archive or another zip file?)",
                "point tpshard convert at the checkpoint's state dict: model.save_pretrained(dir, safe_serialization=True)");
  if (found > 1) throw Error(zip.path() + ": the zip archive holds " + std::to_string(found) + " <folder>/data.pkl entries", kCorrupt);
  return top;
}

}  // namespace

TorchCheckpointFile::TorchCheckpointFile(const std::string& path) : map_(path) {
  const uint8_t* const base = map_.data();
  check_zip_magic(path, base, map_.size());
  const ZipArchive zip(base, map_.size(), path);
  const std::string top = top_folder(zip);
  if (const ZipEntry* bo = zip.find(top + "/byteorder")) {
    const uint8_t* b = zip.stored_bytes(*bo);
    if (!(bo->size == 6 && std::memcmp(b, "little", 6) == 0))
      throw Error(path + ": " + bo->name + " says the tensors are not little-endian",
                  "re-save the checkpoint on a little-endian machine (x86-64, ARM), or as safetensors");
  }
  const ZipEntry& pkl = *zip.find(top + "/data.pkl");
  const uint8_t* pickle = zip.stored_bytes(pkl);
  if (pkl.size > kMaxTorchPickleBytes)
    throw Error(path + ": " + pkl.name + " is " + std::to_string(pkl.size) + " bytes, over the limit of " +
                    std::to_string(kMaxTorchPickleBytes >> 20) + " MiB",
                "a state dict's pickle is far smaller: the file is corrupt or not a state dict; re-save it as safetensors");
  const TorchStateDict sd = read_torch_state_dict(pickle, pkl.size, path + ": " + pkl.name);
  // Each storage: its entry, stored, exactly numel x element size bytes.
  std::vector<const ZipEntry*> entries;
  for (const TorchStorage& s : sd.storages) {
    const std::string name = top + "/data/" + s.key;
    const ZipEntry* e = zip.find(name);
    if (!e)
      throw Error(path + ": data.pkl names storage '" + s.key + "', but the archive has no entry " + name, kCorrupt);
    zip.stored_bytes(*e);
    uint64_t want = 0;
    if (!layout::mul_ok(s.numel, s.element_size, &want) || want != e->size)
      throw Error(path + ": entry " + name + " holds " + std::to_string(e->size) + " bytes; data.pkl says " +
                      std::to_string(s.numel) + " " + s.dtype_str + " elements",
                  kCorrupt);
    entries.push_back(e);
  }
  // Each tensor: a contiguous row-major view that ends inside its storage.
  for (const TorchTensorRef& r : sd.tensors) {
    const TorchStorage& s = sd.storages[r.storage];
    const std::string W = path + ": tensor " + r.name;
    uint64_t numel = 1;
    for (const int64_t d : r.shape)
      if (!layout::mul_ok(numel, static_cast<uint64_t>(d), &numel)) throw Error(W + ": element count overflows", kCorrupt);
    if (numel > 0) {
      uint64_t expect = 1;  // row-major stride of dimension k: the product of the sizes after it
      for (size_t k = r.shape.size(); k-- > 0;) {
        if (r.shape[k] != 1 && static_cast<uint64_t>(r.stride[k]) != expect)
          throw Error(W + ": strides " + shape_str(r.stride) + " for shape " + shape_str(r.shape) +
                          " are not contiguous row-major (a transposed or strided view was saved)",
                      "save contiguous tensors: {k: v.contiguous() for k, v in state_dict.items()}, or "
                      "model.save_pretrained(dir, safe_serialization=True)");
        expect *= static_cast<uint64_t>(r.shape[k]);
      }
    }
    uint64_t end = 0;
    if (!layout::add_ok(r.storage_offset, numel, &end) || end > s.numel)
      throw Error(W + ": storage_offset " + std::to_string(r.storage_offset) + " + " + std::to_string(numel) +
                      " elements exceeds its storage '" + s.key + "' of " + std::to_string(s.numel) + " elements",
                  kCorrupt);
    StTensor t;
    t.name = r.name;
    t.file = path;
    t.dtype_str = s.dtype_str;
    t.dtype_supported = s.dtype_supported;
    t.dtype = s.dtype;
    t.shape = r.shape;
    t.bytes = numel * s.element_size;
    t.file_offset = entries[r.storage]->data_offset + r.storage_offset * s.element_size;
    t.data = base + t.file_offset;
    tensors_.emplace(r.name, std::move(t));
  }
  map_.advise_sequential();
}

}  // namespace tpshard
