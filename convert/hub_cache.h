// hub_cache.h: a Hugging Face repo id ("ORG/NAME" or "ORG/NAME@REVISION") as a directory of the local hub
// cache, found the way huggingface_hub lays it out: CACHE/models--ORG--NAME/refs/REVISION holds a commit
// hash, CACHE/models--ORG--NAME/snapshots/HASH/ the files. CACHE is $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub. Nothing is downloaded.
#pragma once
#include <string>

namespace tpshard {

/// `source` itself when it exists on disk or does not look like a repo id (then the caller reports the
/// missing path). A repo id: its snapshot directory for REVISION (default "main"; a branch or tag
/// under refs/, or a commit hash under snapshots/). Throws Error naming the repo id, the cache directory
/// and the download command when the repo or revision is not cached.
std::string resolve_model_source(const std::string& source);

/// The huggingface_hub command that downloads repo id `source` ("ORG/NAME[@REVISION]"), in backquotes:
/// "`hf download ORG/NAME --revision REVISION`" (no --revision for main).
std::string hub_download_command(const std::string& source);

}  // namespace tpshard
