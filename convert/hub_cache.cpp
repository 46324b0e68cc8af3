// hub_cache.cpp: resolve_model_source (hub_cache.h).
#include "convert/hub_cache.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "format/error.h"

namespace tpshard {
namespace {

namespace fs = std::filesystem;

/// "ORG/NAME" or "ORG/NAME@REVISION", with the characters Hugging Face allows in names.
bool is_repo_id(const std::string& s, std::string* repo, std::string* revision) {
  const size_t at = s.find('@');
  *repo = s.substr(0, at);
  *revision = at == std::string::npos ? "main" : s.substr(at + 1);
  const size_t slash = repo->find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == repo->size() || repo->find('/', slash + 1) != std::string::npos)
    return false;
  for (char c : *repo)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/')) return false;
  if (repo->find("..") != std::string::npos || revision->empty() || revision->find("..") != std::string::npos) return false;
  return true;
}

std::string hub_cache_dir() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return std::string(h) + "/hub";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/huggingface/hub";
}

}  // namespace

std::string resolve_model_source(const std::string& source) {
  std::error_code ec;
  std::string repo, revision;
  if (fs::exists(source, ec) || !is_repo_id(source, &repo, &revision)) return source;
  const std::string cache = hub_cache_dir();
  std::string folder = "models--" + repo;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path root = fs::path(cache) / folder;
  const std::string fetch = "download it first, e.g. `hf download " + repo +
                            (revision == "main" ? std::string() : " --revision " + revision) +
                            "` (huggingface_hub), or pass the model's local directory";
  if (!fs::is_directory(root, ec))
    throw Error(source + ": not a local directory, and not in the Hugging Face cache (" + root.string() + " does not exist)",
                fetch);
  std::string commit = revision;
  std::ifstream ref(root / "refs" / revision);
  if (ref) std::getline(ref, commit);
  const fs::path snapshot = root / "snapshots" / commit;
  if (commit.empty() || commit.find('/') != std::string::npos || !fs::is_directory(snapshot, ec))
    throw Error(source + ": revision " + revision + " is not in the Hugging Face cache (" + root.string() +
                    " has no refs/" + revision + " or snapshots/" + revision + ")",
                fetch);
  return snapshot.string();
}

}  // namespace tpshard
