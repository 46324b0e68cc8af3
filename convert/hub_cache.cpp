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

/// One part (ORG or NAME) of a repo id as Hugging Face allows it: letters, digits, '-', '_', '.', starting
/// and ending with a letter, digit or '_' ("." and ".." are paths, not names), no "--" or "..".
bool is_repo_id_part(const std::string& part) {
  if (part.empty() || part.size() > 96) return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (!word(part.front()) || !word(part.back())) return false;
  for (char c : part)
    if (!(word(c) || c == '-' || c == '.')) return false;
  return part.find("--") == std::string::npos && part.find("..") == std::string::npos;
}

/// "ORG/NAME" or "ORG/NAME@REVISION", with the characters Hugging Face allows in names. "./x", "../x/y",
/// "/abs/x" and "x/" are paths, never repo ids.
bool is_repo_id(const std::string& s, std::string* repo, std::string* revision) {
  const size_t at = s.find('@');
  *repo = s.substr(0, at);
  *revision = at == std::string::npos ? "main" : s.substr(at + 1);
  const size_t slash = repo->find('/');
  if (slash == std::string::npos || repo->find('/', slash + 1) != std::string::npos) return false;
  if (!is_repo_id_part(repo->substr(0, slash)) || !is_repo_id_part(repo->substr(slash + 1))) return false;
  if (revision->empty() || revision->find("..") != std::string::npos) return false;
  return true;
}

std::string hub_cache_dir() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HF_HOME"); h && *h) return std::string(h) + "/hub";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/huggingface/hub";
}

}  // namespace

std::string hub_download_command(const std::string& source) {
  std::string repo, revision;
  if (!is_repo_id(source, &repo, &revision)) return "`hf download ORG/NAME`";
  return "`hf download " + repo + (revision == "main" ? std::string() : " --revision " + revision) + "`";
}

std::string resolve_model_source(const std::string& source) {
  std::error_code ec;
  std::string repo, revision;
  if (fs::exists(source, ec) || !is_repo_id(source, &repo, &revision)) return source;
  const std::string cache = hub_cache_dir();
  std::string folder = "models--" + repo;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path root = fs::path(cache) / folder;
  const std::string fetch = "download it first, e.g. " + hub_download_command(source) +
                            " (huggingface_hub), or pass the model's local directory";
  if (!fs::is_directory(root, ec))
    throw Error(source + ": not a local directory, and not in the Hugging Face cache (" + root.string() + " does not exist)",
                fetch);
  std::string commit = revision;
  std::ifstream ref(root / "refs" / revision);
  const bool has_ref = static_cast<bool>(ref);
  if (has_ref) std::getline(ref, commit);
  const fs::path snapshot = root / "snapshots" / commit;
  if (commit.empty() || commit.find('/') != std::string::npos || !fs::is_directory(snapshot, ec)) {
    if (has_ref)  // the ref is there, its snapshot is not (an interrupted or pruned download)
      throw Error(source + ": " + (root / "refs" / revision).string() + " names commit '" + commit +
                      "', whose snapshot is not in the cache (" + snapshot.string() + " does not exist)",
                  fetch);
    throw Error(source + ": revision " + revision + " is not in the Hugging Face cache (" + root.string() +
                    " has no refs/" + revision + " or snapshots/" + revision + ")",
                fetch);
  }
  return snapshot.string();
}

}  // namespace tpshard
