// check_tokenizer.h: `tpshard convert` and `tpshard verify` load the tokenizer a model directory holds,
// so a corrupt or unsupported tokenizer.json / tokenizer.model fails there, not at the first tprun.
// Does not own: tokenization (tokenizer/) or copying the files (format/convert).
#pragma once
#include <string>

namespace tpshard::cli {

/// When dir holds tokenizer.json or tokenizer.model, load it with Tokenizer::load (the runtime's own
/// loader); throws Error naming the file and what is wrong, with `hint`. A dir without either passes.
/// An Error about another file of dir that the loader reads (config.json, tokenizer_config.json) is
/// rethrown as it is, with its own hint, so a corrupt config.json is not blamed on the tokenizer.
void check_tokenizer_loads(const std::string& dir, const std::string& hint);

}  // namespace tpshard::cli
