// cuda_runner.cpp: the CUDA ModelRunner: splits a forward() into steps that fit the workspace, uploads
// each step's token metadata, runs the Transformer (layers/transformer.h) eagerly or as a captured CUDA
// graph (decode steps, one graph per batch-size bucket), then gathers argmax pairs / logits over ranks.
#include "runtime/cuda/cuda_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "common/log.h"
#include "format/error.h"
#include "kernels/pdl.cuh"
#include "model/activation_plan.h"
#include "model/kv_ring.h"
#include "model/memory_plan.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/custom_all_reduce.h"
#include "runtime/cuda/layers/transformer.h"
#include "runtime/cuda/layers/weights.h"
#include "runtime/cuda/device_comm.h"
#include "runtime/cuda/nccl_comm.h"
#include "runtime/cuda/peer_comm.h"
#include "runtime/chunk_rounds.h"

namespace tpshard::cuda {
namespace {

/// NCCL path only: largest all_reduce handled by the custom one-shot kernel (decode steps); larger ones go
/// to NCCL. (The peer communicator does every all_reduce itself.)
constexpr size_t kCustomAllReduceMaxBytes = 2u << 20;


class CudaRunner : public ModelRunner {
 public:
  CudaRunner(const Manifest& manifest, int tp_rank, int tp_size, const WeightArena& weights, Communicator& comm,
             const CudaRunnerOptions& opts)
      : config_(manifest.model), tp_rank_(tp_rank), tp_size_(tp_size), opts_(opts), comm_(comm) {
    TPS_CHECK(opts.max_batch > 0 && opts.max_seq_len > 0,
              "cuda runner: max_batch " + std::to_string(opts.max_batch) + " and max_seq_len " +
                  std::to_string(opts.max_seq_len) + " must be positive",
              "pass --max-batch / --max-seq-len >= 1");
    TPS_CHECK(comm.size() == tp_size && comm.rank() == tp_rank,
              "cuda runner: communicator is rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
                  " but the runner was asked for rank " + std::to_string(tp_rank) + " of " + std::to_string(tp_size),
              "create the communicator with the runner's tp_rank / tp_size");
    auto* device_comm = dynamic_cast<DeviceCommunicator*>(&comm);
    TPS_CHECK(device_comm, "cuda runner: the communicator is not a DeviceCommunicator",
              "build the CUDA runner with the communicator of runtime/cuda/make_device_comm.h");
    device_comm_ = device_comm;
    stream_ = device_comm->stream();
    link_ = opts.link;
    const int pp_size = link_ ? link_->pp_size() : 1, pp_stage = link_ ? link_->pp_stage() : 0;
    layout_ = make_parallel_layout(config_, tp_size, pp_size);
    weights_ = bind_weights(weights, config_, layout_, pp_stage);
    micro_batches_ = opts.micro_batches > 0 ? opts.micro_batches : 2 * pp_size;
    weight_bytes_ = weights.bytes();
    max_rows_ = decode_bucket(opts.max_batch);
    max_step_positions_ = max_step_positions(config_, opts.max_seq_len);  // model/activation_plan.h: 1, 2, 4, 8, then multiples of 8
    const int max_tokens = static_cast<int>(step_tokens(opts.max_batch, opts.max_seq_len, max_rows_,
                                                        opts.max_step_tokens > 0 ? opts.max_step_tokens : kMaxStepTokens));
    model_ = std::make_unique<Transformer>(config_, layout_, tp_rank, pp_stage, weights_, comm, stream_, max_tokens, max_rows_,
                                           opts.max_batch + 1, opts.max_seq_len);
    auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
    if (tp_size > 1 && nccl) {  // collective: every rank gets here in the same order, with the same kind
      const size_t want = static_cast<size_t>(max_rows_) * config_.hidden_size * sizeof(float);
      std::string why_not;
      car_ = CustomAllReduce::try_create(*nccl, std::min(want, kCustomAllReduceMaxBytes), &why_not);
      if (car_) {
        model_->set_custom_all_reduce(car_.get());
      } else if (tp_rank == 0 && custom_all_reduce_settings().enabled) {
        std::fprintf(stderr, "note: decode all_reduces use NCCL (custom all_reduce unavailable: %s)\n", why_not.c_str());
      }
    } else if (auto* peer = dynamic_cast<PeerCommunicator*>(&comm)) {
      // Every all_reduce goes through the peer communicator's regions; handing its CustomAllReduce to the
      // transformer only lets it use the fused all_reduce + add_norm kernel too (same regions, same stream).
      model_->set_custom_all_reduce(peer->custom_all_reduce());
    }
    // The gathered buffers of the activation plan (tpshard plan counts them), and their pinned host copies.
    const ActivationPlan ap = plan_activations(config_, layout_.max_counts(), tp_size, dtype_size(weights_.dtype),
                                               max_tokens, max_rows_);
    TPS_CUDA_CHECK(cudaMalloc(&gathered_logits_, ap.gathered_logits));
    TPS_CUDA_CHECK(cudaMalloc(&gathered_pairs_, ap.gathered_argmax));
    TPS_CUDA_CHECK(cudaMallocHost(&host_logits_, ap.gathered_logits));
    TPS_CUDA_CHECK(cudaMallocHost(&host_pairs_, ap.gathered_argmax));
    set_pdl_enabled(opts.pdl);
    use_graphs_ = opts.use_cuda_graphs && !link_;  // stages: every step passes through the link (host)
    lookahead_ = opts.lookahead && !link_;
    TPS_CUDA_CHECK(cudaMalloc(&ids_dev_, static_cast<size_t>(max_rows_) * sizeof(int32_t)));
    for (int p = 0; p < 2; ++p) {
      TPS_CUDA_CHECK(cudaMallocHost(&ids_host_[p], static_cast<size_t>(max_rows_) * sizeof(int32_t)));
      TPS_CUDA_CHECK(cudaEventCreateWithFlags(&ids_ready_[p], cudaEventDisableTiming));
    }
  }

  ~CudaRunner() override {
    cudaStreamSynchronize(stream_);
    for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
    model_.reset();
    car_.reset();
    cudaFree(gathered_logits_);
    cudaFree(gathered_pairs_);
    cudaFreeHost(host_logits_);
    cudaFreeHost(host_pairs_);
    cudaFree(ids_dev_);
    for (int p = 0; p < 2; ++p) {
      cudaFreeHost(ids_host_[p]);
      cudaEventDestroy(ids_ready_[p]);
    }
  }

  /// CudaRunnerOptions::warm_up: a prefill step of max_tokens dummy tokens (token 0 from position 0 in
  /// slots 0, 1, ...) and a decode step of max_batch rows. The kv_cache rows they write are rewritten by
  /// any later chunk before it reads them (attention reads only positions a chunk's sequence wrote).
  void warm_up() {
    std::vector<SeqChunk> chunks;
    for (int left = model_->max_tokens(), slot = 0; left > 0 && slot < opts_.max_batch; ++slot) {
      const int len = std::min(left, opts_.max_seq_len);
      chunks.push_back({slot, 0, std::vector<int32_t>(static_cast<size_t>(len), 0)});
      left -= len;
    }
    std::vector<int32_t> ids(chunks.size());
    forward(chunks, nullptr, ids.data());
    chunks.clear();
    for (int slot = 0; slot < opts_.max_batch; ++slot) chunks.push_back({slot, 0, {0}});
    ids.resize(chunks.size());
    forward(chunks, nullptr, ids.data());
    device_comm_->synchronize();
    ahead_.valid = false;
    stats_ = LookaheadStats{};
  }

  const ModelConfig& config() const override { return config_; }
  const LookaheadStats& stats() const { return stats_; }
  int max_batch() const override { return opts_.max_batch; }
  int max_seq_len() const override { return opts_.max_seq_len; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  uint64_t kv_cache_bytes() const override { return model_->kv_cache_bytes(); }

  std::string pipeline_report() const override {
    if (!link_) return {};
    return pipeline_report_line(link_->pp_stage(), layout_.stage_layers[static_cast<size_t>(link_->pp_stage())],
                                forward_s_, wait_s_);
  }

  void forward(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) override {
    validate(chunks);
    if (needs_rounds(chunks, max_step_positions_))  // a ring kv_cache takes bounded pieces per step
      return forward_in_rounds(chunks, max_step_positions_, config_.vocab_size, logits, argmax,
                               [this](const std::vector<SeqChunk>& c, float* l, int32_t* a) { forward(c, l, a); });
    if (link_) return forward_pipeline(chunks, logits, argmax);
    const bool decode = std::all_of(chunks.begin(), chunks.end(), [](const SeqChunk& c) { return c.tokens.size() == 1; });
    if (decode && static_cast<int>(chunks.size()) <= max_rows_) {
      decode_step(chunks, logits, argmax);
      return;
    }
    ahead_.valid = false;  // the prefill below rewrites the device meta the ahead step would continue from
    // Prefill (or mixed): pieces of chunks packed into steps of at most max_tokens tokens and max_rows chunk ends.
    const int max_tokens = model_->max_tokens();
    int32_t* meta = model_->meta_host();
    int n = 0, out_row = 0;
    std::vector<int> row_chunk;  // output row (output_rows order) of each logits row of this step
    auto flush = [&] {
      if (n == 0) return;
      model_->upload_meta(n);
      model_->run(model_->meta_device(n, static_cast<int>(row_chunk.size())));
      collect(row_chunk, logits, argmax);
      n = 0;
      row_chunk.clear();
    };
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const SeqChunk& c = chunks[ci];
      for (size_t k = 0; k < c.tokens.size(); ++k) {
        if (n == max_tokens) flush();
        put_token(meta, max_tokens, n, c, k);
        if (c.all_logits || k + 1 == c.tokens.size()) {
          meta[3 * max_tokens + row_chunk.size()] = n;
          row_chunk.push_back(out_row++);
        }
        ++n;
        if (static_cast<int>(row_chunk.size()) == max_rows_) flush();
      }
    }
    flush();
  }

 private:
  /// forward() with several stages: the chunks in micro-batches, each packed into steps as in forward();
  /// per step the first stage embeds the tokens, the others receive the previous stage's hidden states
  /// (residual stream, f32) into the transformer's residual(); stages before the last send theirs on.
  /// The last stage gathers each micro-batch's rows, then shares the step's results with every stage.
  void forward_pipeline(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    auto waited = [this](Clock::time_point t0) { wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count(); };
    const size_t m = output_rows(chunks), V = static_cast<size_t>(config_.vocab_size);
    const size_t H = static_cast<size_t>(config_.hidden_size);
    const bool want = logits || argmax;  // the same on every rank (SPMD)
    // The step's results, filled by the last stage: logits [m, V] f32 when asked for, then m int32 ids.
    const size_t logit_bytes = logits ? m * V * sizeof(float) : 0;
    std::vector<char> results(want ? logit_bytes + m * sizeof(int32_t) : 0);
    float* res_logits = logits ? reinterpret_cast<float*>(results.data()) : nullptr;
    int32_t* res_ids = want ? reinterpret_cast<int32_t*>(results.data() + logit_bytes) : nullptr;
    const int max_tokens = model_->max_tokens();
    int32_t* meta = model_->meta_host();
    int n = 0, out_row = 0;
    std::vector<int> row_chunk;  // output row (output_rows order) of each logits row of this step
    auto step = [&] {
      if (n == 0) return;
      model_->upload_meta(n);
      if (!model_->first_stage()) {
        const Clock::time_point t0 = Clock::now();
        link_->recv_prev(model_->residual(), static_cast<size_t>(n) * H * sizeof(float));
        waited(t0);
      }
      model_->run(model_->meta_device(n, static_cast<int>(row_chunk.size())));
      if (!model_->last_stage()) {
        device_comm_->synchronize();  // the hidden states are complete (and the metadata copied)
        link_->send_next(model_->residual(), static_cast<size_t>(n) * H * sizeof(float));
      } else if (want) {
        collect(row_chunk, res_logits, res_ids);
      } else {
        device_comm_->synchronize();
      }
      n = 0;
      row_chunk.clear();
    };
    const size_t nc = chunks.size();
    const size_t groups = std::min<size_t>(nc, static_cast<size_t>(micro_batches_));
    for (size_t g = 0; g < groups; ++g) {
      for (size_t ci = g * nc / groups; ci < (g + 1) * nc / groups; ++ci) {
        const SeqChunk& c = chunks[ci];
        for (size_t k = 0; k < c.tokens.size(); ++k) {
          if (n == max_tokens) step();
          put_token(meta, max_tokens, n, c, k);
          if (c.all_logits || k + 1 == c.tokens.size()) {
            meta[3 * max_tokens + row_chunk.size()] = n;
            row_chunk.push_back(out_row++);
          }
          ++n;
          if (static_cast<int>(row_chunk.size()) == max_rows_) step();
        }
      }
      step();  // a micro-batch ends a step: it moves to the next stage while this one takes the next
    }
    if (want) {
      const Clock::time_point t0 = Clock::now();
      link_->share_from_last(results.data(), results.size());
      if (!model_->last_stage()) waited(t0);
    }
    forward_s_ += std::chrono::duration<double>(Clock::now() - start).count();
    if (logits) std::memcpy(logits, res_logits, logit_bytes);
    if (argmax) std::memcpy(argmax, res_ids, m * sizeof(int32_t));
  }

  /// Writes token k of chunk c as token n of the step into the host meta (layout: Transformer::upload_meta).
  static void put_token(int32_t* meta, int max_tokens, int n, const SeqChunk& c, size_t k) {
    meta[n] = c.tokens[k];
    meta[max_tokens + n] = c.slot;
    meta[2 * max_tokens + n] = c.start_pos + static_cast<int>(k);
    meta[4 * max_tokens + n] = c.prefix_slot >= 0 ? c.prefix_slot : 0;
    meta[5 * max_tokens + n] = c.prefix_slot >= 0 ? c.prefix_len : 0;
  }

  void validate(const std::vector<SeqChunk>& chunks) const {
    for (const SeqChunk& c : chunks) {
      TPS_CHECK(!c.tokens.empty(), "cuda runner: a chunk for slot " + std::to_string(c.slot) + " has no tokens",
                "pass at least one token per chunk");
      TPS_CHECK(c.slot >= 0 && c.slot < opts_.max_batch,
                "cuda runner: slot " + std::to_string(c.slot) + " is outside 0.." + std::to_string(opts_.max_batch - 1),
                "raise --max-batch");
      TPS_CHECK(c.start_pos >= 0 && c.start_pos + static_cast<long long>(c.tokens.size()) <= opts_.max_seq_len,
                "cuda runner: slot " + std::to_string(c.slot) + " would reach position " +
                    std::to_string(c.start_pos + c.tokens.size()) + ", beyond max_seq_len " +
                    std::to_string(opts_.max_seq_len),
                "raise --max-seq-len or shorten the prompt / --max-new-tokens");
      TPS_CHECK(c.prefix_slot < 0 || (c.prefix_slot < opts_.max_batch && c.prefix_slot != c.slot &&
                                      c.prefix_len >= 0 && c.prefix_len <= c.start_pos),
                "cuda runner: shared prefix (slot " + std::to_string(c.prefix_slot) + ", " +
                    std::to_string(c.prefix_len) + " positions) invalid for a chunk of slot " + std::to_string(c.slot) +
                    " at position " + std::to_string(c.start_pos),
                "this is a bug in the caller");
      for (int32_t t : c.tokens)
        TPS_CHECK(t >= 0 && t < config_.vocab_size,
                  "cuda runner: token id " + std::to_string(t) + " is outside the vocabulary (" +
                      std::to_string(config_.vocab_size) + ")",
                  "check the tokenizer matches the model");
    }
  }

  /// One token per chunk: pad to a bucket (padding tokens write the scratch slot) and replay its graph.
  /// Lookahead (greedy decode without logits, graphs on): the graph ends with argmax_merge_advance, which
  /// writes this step's tokens into the device meta as the NEXT step's inputs (positions + 1). Right
  /// after step s, the runner launches the graph once more (step s + 1, the "ahead" step) before it waits
  /// for step s's ids, so the GPU computes s + 1 while the host hands s's tokens to the caller and prepares
  /// the next call. The next call takes the ahead step's results when its chunks are the ahead rows (or a
  /// subset of them, in order) fed with the tokens this runner returned; otherwise they are discarded.
  /// Discarding is safe: the ahead step only wrote K/V at position start_pos + 1 of its slots, which any
  /// later chunk reaching that position writes before reading (attention reads positions < its own).
  void decode_step(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) {
    const int n = static_cast<int>(chunks.size());
    ++stats_.decode_steps;
    if (ahead_.valid && !logits && argmax) {
      std::vector<int> rows;
      if (match_ahead(chunks, &rows)) {
        const int parity = ahead_.parity;
        ++stats_.ahead_used;
        const bool continue_ahead = static_cast<int>(rows.size()) == ahead_.n && can_run_ahead(chunks, ahead_.key);
        ahead_.valid = false;
        if (continue_ahead) launch_ahead(chunks, ahead_.bucket, ahead_.key);  // step s + 2 while we wait for s + 1
        wait_ids(parity);
        for (int i = 0; i < n; ++i) argmax[i] = ids_host_[parity][rows[i]];
        if (ahead_.valid) ahead_.prev_ids.assign(argmax, argmax + n);
        return;
      }
      ahead_.valid = false;  // mismatch: the ahead step's results are dropped (see above)
    }
    const int b = decode_bucket(n);
    const int max_tokens = model_->max_tokens();
    int32_t* meta = model_->meta_host();
    for (int i = 0; i < b; ++i) {
      if (i < n) {
        put_token(meta, max_tokens, i, chunks[i], 0);
      } else {  // padding: the scratch slot, never read for real tokens
        const SeqChunk pad{opts_.max_batch, 0, {0}};
        put_token(meta, max_tokens, i, pad, 0);
      }
      meta[3 * max_tokens + i] = i;
    }
    model_->upload_meta(b);
    const bool cascade = opts_.cascade_attention && std::any_of(chunks.begin(), chunks.end(), [](const SeqChunk& c) {
                           return c.prefix_slot >= 0 && c.prefix_len > 0;
                         });
    const StepMeta m = model_->meta_device(b, b, /*decode=*/true, cascade);
    const int key = graph_key(b, cascade);
    auto it = graphs_.find(key);
    if (it != graphs_.end()) {
      TPS_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    } else {
      run_decode(m);  // eager: also creates the cuBLASLt plans the capture needs
      if (use_graphs_) capture(key, m);
    }
    const int parity = enqueue_ids_copy(b);
    if (argmax && !logits && can_run_ahead(chunks, key)) launch_ahead(chunks, b, key);
    if (logits) {
      std::vector<int> row_chunk(n);
      for (int i = 0; i < n; ++i) row_chunk[i] = i;
      collect(row_chunk, logits, nullptr, b);  // waits for the whole stream
    }
    wait_ids(parity);
    if (argmax) {
      for (int i = 0; i < n; ++i) argmax[i] = ids_host_[parity][i];
      if (ahead_.valid) ahead_.prev_ids.assign(argmax, argmax + n);
    }
  }

  /// The decode step for StepMeta m (bucket rows): the transformer, then the greedy tail: all_gather of
  /// the argmax pairs (tp > 1) and argmax_merge_advance into ids_dev_ and the meta (next step's inputs).
  /// Everything on stream_, capturable.
  void run_decode(const StepMeta& m) {
    model_->run(m);
    const ArgmaxPair* pairs = model_->argmax_local();
    if (tp_size_ > 1) {
      comm_.all_gather(pairs, gathered_pairs_, 2 * static_cast<size_t>(m.n), DType::F32);
      pairs = gathered_pairs_;
    }
    ArgmaxAdvanceParams a;
    a.pairs = pairs;
    a.tp_size = tp_size_;
    a.n = m.n;
    a.ids = ids_dev_;
    a.tokens = const_cast<int32_t*>(m.tokens);
    a.positions = const_cast<int32_t*>(m.positions);
    a.slots = m.slots;
    a.skip_slot = opts_.max_batch;
    a.max_seq_len = opts_.max_seq_len;
    argmax_merge_advance(a, stream_);
  }

  /// Copy the step's merged ids (rows) to the next pinned buffer and record its event; returns the parity.
  int enqueue_ids_copy(int rows) {
    const int p = next_parity_;
    next_parity_ ^= 1;
    TPS_CUDA_CHECK(cudaMemcpyAsync(ids_host_[p], ids_dev_, static_cast<size_t>(rows) * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream_));
    TPS_CUDA_CHECK(cudaEventRecord(ids_ready_[p], stream_));
    return p;
  }

  /// Wait until ids_host_[parity] holds its step's ids: busy-polls the event for up to 20 ms (a decode
  /// step takes 1-20 ms; sleeping would add timer slack to every step), then falls back to the
  /// communicator's synchronize(), which waits for the whole stream with its error checks and timeout.
  void wait_ids(int parity) {
    const auto start = std::chrono::steady_clock::now();
    for (unsigned it = 0;; ++it) {
      const cudaError_t q = cudaEventQuery(ids_ready_[parity]);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) TPS_CUDA_CHECK(q);
      if (it % 256 == 0 && std::chrono::steady_clock::now() - start > std::chrono::milliseconds(20)) break;
    }
    device_comm_->synchronize();
  }

  /// The graph of a decode bucket: one per (rows, cascade attention on or off).
  static int graph_key(int bucket, bool cascade) { return 2 * bucket + (cascade ? 1 : 0); }

  /// True when the step after `chunks` may be computed ahead: lookahead on, the graph `key` exists,
  /// no chunk is marked last_step, and every row's next position fits the kv_cache.
  bool can_run_ahead(const std::vector<SeqChunk>& chunks, int key) const {
    if (!lookahead_ || graphs_.find(key) == graphs_.end()) return false;
    for (const SeqChunk& c : chunks)
      if (c.last_step || c.start_pos + 2 > opts_.max_seq_len) return false;
    return true;
  }

  /// Replay graph `key` (bucket rows) on the inputs the previous replay advanced to, then copy its ids.
  void launch_ahead(const std::vector<SeqChunk>& chunks, int bucket, int key) {
    TPS_CUDA_CHECK(cudaGraphLaunch(graphs_.at(key), stream_));
    ahead_.parity = enqueue_ids_copy(bucket);
    ahead_.bucket = bucket;
    ahead_.key = key;
    ahead_.n = static_cast<int>(chunks.size());
    ahead_.slots.resize(chunks.size());
    ahead_.positions.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      ahead_.slots[i] = chunks[i].slot;
      ahead_.positions[i] = chunks[i].start_pos + 1;
    }
    ahead_.valid = true;  // prev_ids (the tokens it was fed) are set by the caller once known
  }

  /// Map each chunk to a row of the ahead step (same slot, next position, fed the id returned for that row
  /// by the previous call), in order; false when any chunk has no such row.
  bool match_ahead(const std::vector<SeqChunk>& chunks, std::vector<int>* rows) const {
    if (static_cast<int>(ahead_.prev_ids.size()) != ahead_.n) return false;
    int j = 0;
    for (const SeqChunk& c : chunks) {
      while (j < ahead_.n && ahead_.slots[j] != c.slot) ++j;
      if (j == ahead_.n || c.tokens.size() != 1 || c.start_pos != ahead_.positions[j] ||
          c.tokens[0] != ahead_.prev_ids[j])
        return false;
      rows->push_back(j++);
    }
    return true;
  }

  void capture(int key, const StepMeta& m) {
    cudaGraph_t graph = nullptr;
    TPS_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      run_decode(m);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      disable_graphs("capture of the decode step failed");
      return;
    }
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      disable_graphs(cudaGetErrorString(e));
      return;
    }
    graphs_[key] = exec;
  }

  void disable_graphs(const std::string& why) {
    use_graphs_ = false;
    std::fprintf(stderr, "warning: tp_rank %d: CUDA graphs disabled (%s); decode runs eagerly\n", tp_rank_, why.c_str());
  }

  /// Gather this step's rows over ranks and write them to the caller's outputs: row i of the step goes
  /// to output row row_chunk[i]. `rows` = rows computed (>= row_chunk.size() when a decode bucket was padded).
  void collect(const std::vector<int>& row_chunk, float* logits, int32_t* argmax, int rows = -1) {
    const int r = rows < 0 ? static_cast<int>(row_chunk.size()) : rows;
    if (r == 0) {  // a middle piece of a long prompt: nothing to gather (same on every rank), but the
      device_comm_->synchronize();  // pinned metadata buffer may only be rewritten once its copy has run
      return;
    }
    const size_t vpr = layout_.max_counts().vocab_rows.size();  // gathered per rank
    const int64_t vocab = config_.vocab_size;
    if (argmax) {
      const ArgmaxPair* src = model_->argmax_local();
      if (tp_size_ > 1) {
        comm_.all_gather(src, gathered_pairs_, 2 * static_cast<size_t>(r), DType::F32);
        src = gathered_pairs_;
      }
      TPS_CUDA_CHECK(cudaMemcpyAsync(host_pairs_, src, static_cast<size_t>(tp_size_) * r * sizeof(ArgmaxPair),
                                     cudaMemcpyDeviceToHost, stream_));
    }
    if (logits) {
      const float* src = model_->logits_local();
      if (tp_size_ > 1) {
        comm_.all_gather(src, gathered_logits_, static_cast<size_t>(r) * vpr, DType::F32);
        src = gathered_logits_;
      }
      TPS_CUDA_CHECK(cudaMemcpyAsync(host_logits_, src, static_cast<size_t>(tp_size_) * r * vpr * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
    }
    device_comm_->synchronize();
    if (argmax) {
      std::vector<int32_t> best(r);
      merge_argmax(host_pairs_, tp_size_, r, best.data());
      for (size_t i = 0; i < row_chunk.size(); ++i) argmax[row_chunk[i]] = best[i];
    }
    if (logits) {
      for (size_t i = 0; i < row_chunk.size(); ++i) {
        float* dst = logits + static_cast<size_t>(row_chunk[i]) * vocab;
        for (int rank = 0; rank < tp_size_; ++rank) {
          const int64_t begin = rank * static_cast<int64_t>(vpr);
          const int64_t count = std::min<int64_t>(vpr, vocab - begin);
          if (count <= 0) break;
          std::memcpy(dst + begin, host_logits_ + (static_cast<size_t>(rank) * r + i) * vpr, count * sizeof(float));
        }
      }
    }
  }

  ModelConfig config_;
  int tp_rank_ = 0, tp_size_ = 1;
  StageLink* link_ = nullptr;  ///< nullptr: one stage
  int micro_batches_ = 2;
  double forward_s_ = 0, wait_s_ = 0;  ///< pipeline: time in forward(), and in it waiting for other stages
  CudaRunnerOptions opts_;
  Communicator& comm_;
  DeviceCommunicator* device_comm_ = nullptr;  ///< comm_ as the CUDA communicator (stream, synchronize)
  cudaStream_t stream_ = nullptr;
  ParallelLayout layout_;
  ModelWeights weights_;
  int max_rows_ = 1;
  int64_t max_step_positions_ = 0;  ///< model/kv_ring.h: longest piece of one chunk per step (ring kv_cache)
  uint64_t weight_bytes_ = 0;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<CustomAllReduce> car_;
  float* gathered_logits_ = nullptr;
  ArgmaxPair* gathered_pairs_ = nullptr;
  float* host_logits_ = nullptr;
  ArgmaxPair* host_pairs_ = nullptr;
  bool use_graphs_ = true;
  std::map<int, cudaGraphExec_t> graphs_;  ///< by graph_key(bucket, cascade)
  bool lookahead_ = true;
  LookaheadStats stats_;
  int32_t* ids_dev_ = nullptr;                       // [max_rows] merged greedy ids of the last decode step
  int32_t* ids_host_[2] = {nullptr, nullptr};        // pinned copies, alternating between consecutive steps
  cudaEvent_t ids_ready_[2] = {nullptr, nullptr};
  int next_parity_ = 0;
  /// The decode step launched ahead (decode_step's comment).
  struct Ahead {
    bool valid = false;
    int parity = 0, bucket = 0, key = 0, n = 0;
    std::vector<int> slots, positions;  // rows of the ahead step: slot and the position it was fed
    std::vector<int32_t> prev_ids;      // the token it was fed per row (= ids returned by the previous call)
  } ahead_;
};

}  // namespace

LookaheadStats lookahead_stats(const ModelRunner& runner) {
  const auto* r = dynamic_cast<const CudaRunner*>(&runner);
  return r ? r->stats() : LookaheadStats{};
}

std::unique_ptr<ModelRunner> make_cuda_runner(const Manifest& manifest, int tp_rank, int tp_size,
                                              const WeightArena& weights, Communicator& comm,
                                              const CudaRunnerOptions& opts) {
  auto runner = std::make_unique<CudaRunner>(manifest, tp_rank, tp_size, weights, comm, opts);
  if (opts.warm_up) {
    const auto t0 = std::chrono::steady_clock::now();
    runner->warm_up();
    log_line(LogLevel::Verbose, "tprun: tp_rank %d: runner warm-up (one prefill step, one decode step) %.3f s\n", tp_rank,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return runner;
}

}  // namespace tpshard::cuda
