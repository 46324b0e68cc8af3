// convert.cpp: convert_checkpoint, the driver of `tpshard convert`.
// Flow: validate everything that can be validated before writing (config, checkpoint, tp layouts,
// tensor table, unused tensors, OUT) -> temp dir -> fingerprint sources -> for each output tensor in
// arena order, all (tp_size, tp_rank) slices in parallel, streamed in 4 MiB chunks from the mmapped
// source (pages released after use, so RSS stays flat) -> finish shards, hash files -> manifest,
// tokenizer files -> rename into place.
#include "convert/convert.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "convert/add_layouts.h"
#include "convert/fs_util.h"
#include "common/progress.h"
#include "convert/temp_owner.h"
#include "model/multimodal.h"
#include "model/parallel_layout.h"
#include "model/tensor_plan.h"
#include "format/error.h"
#include "format/hash.h"
#include "format/checkpoint.h"
#include "format/shard_layout.h"

namespace tpshard {

namespace fs = std::filesystem;


namespace {

constexpr size_t kChunkBytes = 4u << 20;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// Run fn(i) for i in [0, n) on up to `threads` threads; rethrows the first exception.
template <typename Fn>
void parallel_for(size_t n, int threads, Fn fn) {
  const size_t nt = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads)));
  if (nt <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr err;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < nt; ++t)
    pool.emplace_back([&] {
      for (size_t i; !failed && (i = next++) < n;) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!err) err = std::current_exception();
          failed = true;
        }
      }
    });
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

void check_interrupt() {
  if (interrupted()) throw Error("interrupted (SIGINT/SIGTERM): conversion stopped, nothing was written", "");
}

/// The error for a source tensor holding NaN/inf. Counted over the whole tensor only here, on the error
/// path (the streaming check in write_slice stops at the first bad chunk).
[[noreturn]] void throw_nonfinite(const StTensor& st) {
  const uint64_t n = st.bytes / dtype_size(st.dtype);
  uint64_t nans = 0;
  const uint64_t bad = count_nonfinite(st.data, st.dtype, static_cast<size_t>(n), &nans);
  throw Error("checkpoint " + st.file + ": tensor '" + st.name + "' has " + std::to_string(nans) + " NaN and " +
                  std::to_string(bad - nans) + " inf values (of " + std::to_string(n) + ")",
              "the checkpoint is corrupt: re-download it (or pass --allow-nonfinite to convert anyway)");
}

/// Streams one rank's slice of one output tensor into its shard writer (all codec passes). With
/// check_finite, every source chunk is checked for NaN/inf as it passes through (no extra read).
void write_slice(const RankSlice& s, const std::vector<const StTensor*>& src, DType out, const Checkpoint& ck,
                 ShardWriter& w, size_t index, Progress& progress, bool check_finite) {
  const size_t osz = dtype_size(out);
  std::vector<uint8_t> buf(kChunkBytes);
  size_t fill = 0;
  auto flush = [&] {
    if (!fill) return;
    w.append(index, buf.data(), fill);
    progress.add(fill);
    fill = 0;
    check_interrupt();
  };
  // Append n elements from p (source dtype sdt), converting to `out`.
  auto emit = [&](const StTensor& st, const uint8_t* p, uint64_t n) {
    const DType sdt = st.dtype;
    const std::string& name = st.name;
    const size_t ssz = dtype_size(sdt);
    if (check_finite && count_nonfinite(p, sdt, static_cast<size_t>(n))) throw_nonfinite(st);
    while (n) {
      if (buf.size() - fill < osz) flush();
      const uint64_t k = std::min<uint64_t>(n, (buf.size() - fill) / osz);
      convert_elements(p, sdt, buf.data() + fill, out, static_cast<size_t>(k), name);
      fill += static_cast<size_t>(k) * osz;
      p += k * ssz;
      n -= k;
    }
  };
  for (int pass = 0; pass < w.passes(index); ++pass) {
    for (const Span& sp : s.spans) {
      if (sp.source < 0) {
        uint64_t n = static_cast<uint64_t>(sp.rows * s.local_cols) * osz;
        while (n) {
          if (fill == buf.size()) flush();
          const size_t k = static_cast<size_t>(std::min<uint64_t>(n, buf.size() - fill));
          std::fill(buf.begin() + fill, buf.begin() + fill + k, 0);
          fill += k;
          n -= k;
        }
        continue;
      }
      const StTensor& st = *src[sp.source];
      const size_t ssz = dtype_size(st.dtype);
      const int64_t cols = st.shape.size() == 1 ? 1 : st.shape[1];
      const uint64_t row_bytes = static_cast<uint64_t>(cols) * ssz;
      if (sp.col_begin == 0 && s.local_cols == cols) {
        // Contiguous rows: convert in chunks and release each consumed source range.
        const uint64_t total = static_cast<uint64_t>(sp.rows) * cols;
        const uint64_t step = kChunkBytes / ssz;
        for (uint64_t e = 0; e < total; e += step) {
          const uint64_t k = std::min(step, total - e);
          const uint64_t off = static_cast<uint64_t>(sp.row_begin) * row_bytes + e * ssz;
          emit(st, st.data + off, k);
          ck.release(st, off, k * ssz);
        }
      } else {
        int64_t released = sp.row_begin;
        for (int64_t r = sp.row_begin; r < sp.row_begin + sp.rows; ++r) {
          emit(st, st.data + static_cast<uint64_t>(r) * row_bytes + static_cast<uint64_t>(sp.col_begin) * ssz,
               static_cast<uint64_t>(s.local_cols));
          if (static_cast<uint64_t>(r + 1 - released) * row_bytes >= kChunkBytes || r + 1 == sp.row_begin + sp.rows) {
            ck.release(st, static_cast<uint64_t>(released) * row_bytes, static_cast<uint64_t>(r + 1 - released) * row_bytes);
            released = r + 1;
          }
        }
      }
    }
    flush();
    w.next_pass(index);
  }
}

void check_out_dir(const ConvertOptions& o) {
  std::error_code ec;
  if (!fs::exists(o.out_dir, ec)) return;
  if (!o.force)
    throw Error(o.out_dir + ": already exists", "pass --force to replace it, or choose another -o");
  const bool is_dir = fs::is_directory(o.out_dir, ec);
  const bool ours = fs::exists(fs::path(o.out_dir) / "manifest.json", ec);
  if (!is_dir || (!ours && !fs::is_empty(o.out_dir, ec)))
    throw Error(o.out_dir + ": exists and is not a tpshard output directory (no manifest.json); --force will not replace it",
                "choose another -o, or remove it yourself");
}

struct Job {
  int pp_size, pp_stage, tp_size, tp_rank;
  ShardWriter* writer;
  std::vector<int> record;  ///< plan index -> the writer's record index, -1 when the stage does not hold it
  const ParallelLayout* layout;
};

}  // namespace

ConvertResult convert_checkpoint(const ConvertOptions& o) {
  ConvertResult res;
  const auto t0 = std::chrono::steady_clock::now();
  // 1. Validate everything before writing anything.
  if (o.tp_sizes.empty()) throw Error("no tp sizes given", "pass --tp, e.g. --tp 1,2,4,8");
  std::vector<int> tps = o.tp_sizes;
  std::sort(tps.begin(), tps.end());
  tps.erase(std::unique(tps.begin(), tps.end()), tps.end());
  const ModelConfig cfg = load_hf_config(o.hf_dir);
  std::vector<int> pps = o.pp_sizes;
  if (pps.empty()) throw Error("no pp sizes given", "pass --pp, e.g. --pp 1,2");
  std::sort(pps.begin(), pps.end());
  pps.erase(std::unique(pps.begin(), pps.end()), pps.end());
  std::map<std::pair<int, int>, ParallelLayout> layouts;  // (pp, tp)
  for (int pp : pps)
    for (int tp : tps) layouts[{pp, tp}] = make_parallel_layout(cfg, tp, pp);
  const Checkpoint ck(o.hf_dir);
  const std::vector<OutputTensor> plan = plan_tensors(cfg);

  // Checkpoint names as the language model's tensor names (the plan's): the same, except in a
  // multimodal checkpoint (model/multimodal.h), whose tensors outside the language model are skipped.
  std::map<std::string, std::string> lm_names;  // language model name -> checkpoint name
  std::vector<std::string> skipped_groups;
  for (const auto& n : ck.names()) {
    std::string lm = n;
    if (!cfg.multimodal_architecture.empty()) {
      lm = multimodal::language_model_tensor(n);
      if (lm.empty()) {
        ++res.outside_language_model;
        const std::string g = multimodal::skipped_group(n);
        if (std::find(skipped_groups.begin(), skipped_groups.end(), g) == skipped_groups.end()) skipped_groups.push_back(g);
        continue;
      }
    }
    auto [it, fresh] = lm_names.emplace(lm, n);
    if (!fresh)
      throw Error(o.hf_dir + ": tensors " + it->second + " and " + n + " are both the language model's " + lm,
                  "remove one of them from the checkpoint");
  }
  if (res.outside_language_model)
    res.skipped_line = multimodal::skipped_line(res.outside_language_model, skipped_groups, cfg.multimodal_architecture);
  std::map<std::string, bool> used;  // by language model name
  for (const auto& [lm, n] : lm_names) used[lm] = false;
  std::vector<std::vector<const StTensor*>> sources(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const OutputTensor& t = plan[i];
    for (size_t k = 0; k < t.sources.size(); ++k) {
      const auto found = lm_names.find(t.sources[k]);
      const StTensor* st = found == lm_names.end() ? nullptr : ck.find(found->second);
      if (!st && !cfg.multimodal_architecture.empty()) {
        if (lm_names.empty())
          throw Error(o.hf_dir + ": the " + cfg.multimodal_architecture + " checkpoint holds no tensor of its language model "
                          "(language_model.* or model.language_model.*)",
                      "check that the checkpoint's weights are complete (the language model may be in other files)");
        if (ck.find(t.sources[k]))
          throw Error(o.hf_dir + ": tensor " + t.sources[k] + " is in the checkpoint without the language_model. prefix "
                          "that the rest of the " + cfg.multimodal_architecture + " language model has",
                      "rename it with the prefix (or re-save the checkpoint) so that all language-model tensors share one layout");
      }
      if (!st)
        throw Error(o.hf_dir + ": tensor " + t.sources[k] + " (needed for " + t.name + ") is missing from the checkpoint",
                    "check that config.json belongs to these weights (architecture " + cfg.architecture + ", " +
                        std::to_string(cfg.num_hidden_layers) + " layers)");
      if (!st->dtype_supported)
        throw Error(st->file + ": tensor " + st->name + " has dtype " + st->dtype_str + "; supported: F32, F16, BF16",
                    "re-save the checkpoint in float32, float16 or bfloat16");
      if (st->shape != t.source_shapes[k])
        throw Error(st->file + ": tensor " + st->name + " has shape " + shape_str(st->shape) + ", config.json implies " +
                        shape_str(t.source_shapes[k]),
                    "check that config.json belongs to these weights");
      used[t.sources[k]] = true;
      sources[i].push_back(st);
    }
  }
  std::vector<std::string> unknown;
  for (const auto& [name, u] : used) {
    if (u) continue;
    if (is_ignorable_source(name, cfg)) res.ignored.push_back(lm_names[name]);
    else unknown.push_back(lm_names[name]);
  }
  if (!unknown.empty() && !o.allow_unused) {
    std::string list;
    for (size_t i = 0; i < unknown.size() && i < 8; ++i) list += (i ? ", " : "") + unknown[i];
    if (unknown.size() > 8) list += ", ... (" + std::to_string(unknown.size()) + " in all)";
    throw Error(o.hf_dir + ": " + std::to_string(unknown.size()) + " tensor(s) not used by " + cfg.architecture + ": " + list,
                "check that config.json matches the weights, or pass --allow-unused to skip them");
  }
  for (auto& n : unknown) res.ignored.push_back(n);
  DType out_dtype = o.dtype == "keep" ? sources[0][0]->dtype : dtype_from_string(o.dtype);
  Manifest existing;  // add_layouts: the conversion in OUT that the new layouts join
  if (o.add_layouts) {
    existing = load_conversion_to_extend(o.out_dir, cfg, o.dtype == "keep" ? std::nullopt : std::optional<DType>(out_dtype));
    out_dtype = existing.dtype;
    for (auto it = layouts.begin(); it != layouts.end();) {
      const auto [pp, tp] = it->first;
      if (!manifest_has_layout(existing, pp, tp)) {
        ++it;
        continue;
      }
      res.already_present.push_back(pp == 1 ? "tp " + std::to_string(tp) : "pp " + std::to_string(pp) + " x tp " + std::to_string(tp));
      it = layouts.erase(it);
    }
    if (layouts.empty()) {
      res.manifest = existing;
      return res;
    }
  } else {
    check_out_dir(o);
  }
  const int threads = o.threads > 0 ? o.threads : std::max(1, std::min(8, static_cast<int>(std::thread::hardware_concurrency())));

  // 2. Write into OUT.tmp-XXXXXX, after removing those a SIGKILLed convert to the same OUT left behind.
  for (const StaleTempDir& d : remove_stale_temp_dirs(o.out_dir))
    std::fprintf(stderr, "tpshard convert: %s %s: %s\n",
                 d.removed ? "removed the stale temporary directory" : "kept the temporary directory", d.path.c_str(),
                 d.why.c_str());
  TempDirGuard tmp(o.out_dir);
  Manifest& m = res.manifest;
  m.tool_version = tool_version();
  m.model = cfg;
  m.dtype = out_dtype;
  for (const auto& f : ck.files()) {
    res.source_bytes += f->size();
    m.source.push_back({fs::path(f->path()).filename().string(), f->size(), 0});
  }
  if (o.hash_source) {
    Progress p("hashing source", res.source_bytes, ProgressUnit::Bytes, o.progress);
    parallel_for(ck.files().size(), threads, [&](size_t i) {
      uint64_t done = 0;
      m.source[i].xxh3 = xxh3_file(ck.files()[i]->path(), &done, check_interrupt);  // Ctrl-C: within one chunk
      p.add(done);
    });
  }
  // config.json belongs to the checkpoint's identity too (it decides what the weights compute).
  {
    const std::string config_path = o.hf_dir + "/config.json";
    m.source.push_back({"config.json", fs::file_size(config_path), o.hash_source ? xxh3_file(config_path) : 0});
  }
  if (o.add_layouts) check_same_source(existing.source, m.source, o.out_dir, o.hf_dir);

  std::vector<std::unique_ptr<ShardWriter>> writers;
  std::vector<Job> jobs;  // one per (pp_size, pp_stage, tp_size, tp_rank)
  uint64_t total_bytes = 0;
  for (const auto& [key, layout] : layouts) {
    const auto [pp, tp] = key;
    for (int stage = 0; stage < pp; ++stage)
      for (int r = 0; r < tp; ++r) {
        const std::string file = tmp.path() + "/" + shard_file_name(pp, stage, tp, r);
        fs::create_directories(fs::path(file).parent_path());
        writers.push_back(std::make_unique<ShardWriter>(file, r, tp));
        writers.back()->set_zstd_level(o.zstd_level);
        Job job{pp, stage, tp, r, writers.back().get(), std::vector<int>(plan.size(), -1), &layout};
        std::vector<TensorRecord> recs;
        for (size_t i = 0; i < plan.size(); ++i) {
          const OutputTensor& t = plan[i];
          if (!stage_holds(t, cfg, layout, stage)) continue;
          const RankSlice s = slice_for_rank(t, cfg, layout, r);
          TensorRecord rec;
          rec.name = t.name;
          rec.dtype = out_dtype;
          rec.global_shape = s.global_shape;
          rec.local_shape = s.local_shape;
          rec.split = t.split;
          rec.split_axis = s.split_axis;
          rec.codec = s.local_shape.size() >= 2 ? o.codec : Codec::None;
          job.record[i] = static_cast<int>(recs.size());
          recs.push_back(rec);
        }
        writers.back()->declare(std::move(recs));
        for (size_t k = 0; k < writers.back()->records().size(); ++k)
          total_bytes += writers.back()->records()[k].raw_bytes * static_cast<uint64_t>(writers.back()->passes(k));
        jobs.push_back(std::move(job));
      }
  }
  {
    Progress p("converting", total_bytes, ProgressUnit::Bytes, o.progress);
    for (size_t i = 0; i < plan.size(); ++i) {
      parallel_for(jobs.size(), threads, [&](size_t j) {
        const Job& job = jobs[j];
        const int k = job.record[i];
        if (k < 0) return;  // not on this stage
        const RankSlice s = slice_for_rank(plan[i], cfg, *job.layout, job.tp_rank);
        job.writer->begin_tensor(static_cast<size_t>(k));
        write_slice(s, sources[i], out_dtype, ck, *job.writer, static_cast<size_t>(k), p, !o.allow_nonfinite);
        job.writer->end_tensor(static_cast<size_t>(k));
      });
      for (const StTensor* st : sources[i]) ck.drop_pages(*st);
    }
    res.seconds = p.seconds();
    res.output_bytes = total_bytes;
  }
  for (auto& w : writers) w->finish();

  // 3. Hash the shard files, fill the manifest.
  res.shards.resize(jobs.size());
  {
    uint64_t out_total = 0;
    for (const Job& job : jobs)
      out_total += fs::file_size(tmp.path() + "/" + shard_file_name(job.pp_size, job.pp_stage, job.tp_size, job.tp_rank));
    Progress p("hashing shards", out_total, ProgressUnit::Bytes, o.progress);
    parallel_for(jobs.size(), threads, [&](size_t j) {
      const Job& job = jobs[j];
      ShardStats& st = res.shards[j];
      st.tp_size = job.tp_size;
      st.tp_rank = job.tp_rank;
      st.pp_size = job.pp_size;
      st.pp_stage = job.pp_stage;
      st.file = shard_file_name(job.pp_size, job.pp_stage, job.tp_size, job.tp_rank);
      const std::string& rel = st.file;
      uint64_t done = 0;
      st.xxh3 = xxh3_file(tmp.path() + "/" + rel, &done, check_interrupt);  // Ctrl-C: within one chunk
      p.add(done);
      st.file_bytes = done;
      st.tensors = job.writer->records().size();
      for (const auto& r : job.writer->records()) st.raw_bytes += r.raw_bytes;
    });
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    const ShardStats& st = res.shards[j];
    uint64_t arena = 0;
    for (const auto& r : jobs[j].writer->records()) arena = std::max(arena, layout::align_up(r.arena_offset + r.raw_bytes, kDataAlignment));
    const std::string& rel = st.file;
    // The table hash ties the shard to this manifest at load time (check_shard_belongs); read back from
    // the finished file, so it is exactly what the runtime will see.
    const uint64_t table_xxh3 = ShardReader(tmp.path() + "/" + rel).header().table_xxh3;
    const ParallelLayout& layout = *jobs[j].layout;
    ManifestShard ms;
    ms.tp_rank = st.tp_rank;
    ms.file = rel;
    ms.bytes = st.file_bytes;
    ms.xxh3 = st.xxh3;
    ms.weight_bytes = arena;
    ms.table_xxh3 = table_xxh3;
    ms.ranges = layout.tp(st.tp_rank);
    ms.pp_stage = st.pp_stage;
    if (st.pp_size == 1) {
      m.shards[st.tp_size].push_back(ms);
    } else {
      ms.layers = layout.stage_layers[static_cast<size_t>(st.pp_stage)];
      m.pp_shards[{st.pp_size, st.tp_size}].push_back(ms);
    }
  }
  if (o.add_layouts) {  // the new layouts join OUT; its source fingerprint, tokenizer files and other layouts stay
    Manifest merged = existing;
    std::vector<std::string> dirs;
    for (auto& [tp_size, shards] : m.shards) {
      merged.shards[tp_size] = shards;
      dirs.push_back(fs::path(shards.front().file).parent_path().string());
    }
    for (auto& [key, shards] : m.pp_shards) {
      merged.pp_shards[key] = shards;
      dirs.push_back(fs::path(shards.front().file).parent_path().string());
    }
    check_interrupt();
    commit_added_layouts(tmp.path(), o.out_dir, merged, dirs);
    res.manifest = merged;
    res.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  }
  for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                        "generation_config.json", "vocab.json", "merges.txt", "added_tokens.json",
                        "chat_template.jinja"}) {  // transformers 5 keeps the chat template in its own file
    const std::string src = o.hf_dir + "/" + f;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) continue;
    copy_file_synced(src, tmp.path() + "/" + f);
    m.tokenizer_files.push_back(f);
  }
  if (std::find(m.tokenizer_files.begin(), m.tokenizer_files.end(), "tokenizer.json") == m.tokenizer_files.end() &&
      std::find(m.tokenizer_files.begin(), m.tokenizer_files.end(), "tokenizer.model") == m.tokenizer_files.end())
    std::fprintf(stderr,
                 "warning: %s has no tokenizer.json or tokenizer.model: the shards are written, but tprun generate / "
                 "eval / chat will need one (copy it into %s)\n",
                 o.hf_dir.c_str(), o.out_dir.c_str());
  copy_file_synced(o.hf_dir + "/config.json", tmp.path() + "/hf_config.json");
  save_manifest(m, tmp.path());
  check_interrupt();
  tmp.commit(o.out_dir, o.force);
  res.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace tpshard
