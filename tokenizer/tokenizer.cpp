// tokenizer.cpp: Tokenizer::load: pick tokenizer.json (preferred) or tokenizer.model in a dir.
#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "format/error.h"
#include "tokenizer/config_files.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace tpshard {

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw Error(dir.empty() ? std::string("the model directory path is empty") : dir + ": not a directory",
                "pass the model directory that holds tokenizer.json or tokenizer.model");
  const TokenizerSideConfig side = read_side_config(dir);
  const fs::path json = fs::path(dir) / "tokenizer.json";
  if (fs::exists(json)) return HfTokenizer::from_file(json.string(), side);
  const fs::path model = fs::path(dir) / "tokenizer.model";
  if (fs::exists(model)) return SpmTokenizer::from_file(model.string(), side);
  throw Error(
      dir + ": the directory has no tokenizer.json or tokenizer.model",
      "copy the model's tokenizer.json (or tokenizer.model) into it (tpshard convert copies it when the "
      "checkpoint has one)");
}

}  // namespace tpshard
