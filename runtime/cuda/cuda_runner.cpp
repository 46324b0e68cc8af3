// cuda_runner.cpp: the CUDA ModelRunner: splits a forward() into steps that fit the workspace, uploads
// each step's token metadata, runs the Transformer (layers/transformer.h) eagerly or as a captured CUDA
// graph (decode steps, one graph per batch-size bucket), then gathers argmax pairs / logits over ranks.
#include "runtime/cuda/cuda_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "format/error.h"
#include "format/memory_plan.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/custom_all_reduce.h"
#include "runtime/cuda/layers/transformer.h"
#include "runtime/cuda/layers/weights.h"
#include "runtime/cuda/nccl_comm.h"

namespace tpshard::cuda {
namespace {

/// Largest all_reduce handled by the custom one-shot kernel (decode steps); larger ones go to NCCL.
constexpr size_t kCustomAllReduceMaxBytes = 2u << 20;

/// Decode batch-size buckets (format/memory_plan.h): 1, 2, 4, 8, then multiples of 8.
int bucket_for(int n) { return decode_bucket(n); }

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
              "create the NCCL communicator with the runner's tp_rank / tp_size");
    auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
    TPS_CHECK(nccl, "cuda runner: the communicator is not an NcclCommunicator",
              "build the CUDA runner with runtime/cuda/nccl_comm's communicator");
    nccl_ = nccl;
    stream_ = nccl->stream();
    layout_ = make_tp_layout(config_, tp_size);
    weights_ = bind_weights(weights, config_, layout_);
    weight_bytes_ = weights.bytes();
    max_rows_ = bucket_for(opts.max_batch);
    const long long cap = static_cast<long long>(opts.max_batch) * opts.max_seq_len;
    const long long step = opts.max_step_tokens > 0 ? opts.max_step_tokens : kMaxStepTokens;
    const int max_tokens = static_cast<int>(std::max<long long>(max_rows_, std::min(step, cap)));
    model_ = std::make_unique<Transformer>(config_, layout_, tp_rank, weights_, comm, stream_, max_tokens, max_rows_,
                                           opts.max_batch + 1, opts.max_seq_len);
    if (tp_size > 1) {  // collective: every rank gets here in the same order
      const size_t want = static_cast<size_t>(max_rows_) * config_.hidden_size * sizeof(float);
      std::string why_not;
      car_ = CustomAllReduce::try_create(*nccl, std::min(want, kCustomAllReduceMaxBytes), &why_not);
      if (car_) {
        model_->set_custom_all_reduce(car_.get());
      } else if (tp_rank == 0 && std::getenv("TPSHARD_NO_CUSTOM_ALL_REDUCE") == nullptr) {
        std::fprintf(stderr, "note: decode all_reduces use NCCL (custom all_reduce unavailable: %s)\n", why_not.c_str());
      }
    }
    const size_t vpr = layout_.vocab_size_per_rank;
    TPS_CUDA_CHECK(cudaMalloc(&gathered_logits_, static_cast<size_t>(tp_size) * max_rows_ * vpr * sizeof(float)));
    TPS_CUDA_CHECK(cudaMalloc(&gathered_pairs_, static_cast<size_t>(tp_size) * max_rows_ * sizeof(ArgmaxPair)));
    TPS_CUDA_CHECK(cudaMallocHost(&host_logits_, static_cast<size_t>(tp_size) * max_rows_ * vpr * sizeof(float)));
    TPS_CUDA_CHECK(cudaMallocHost(&host_pairs_, static_cast<size_t>(tp_size) * max_rows_ * sizeof(ArgmaxPair)));
    use_graphs_ = opts.use_cuda_graphs && std::getenv("TPSHARD_NO_CUDA_GRAPHS") == nullptr;
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
  }

  const ModelConfig& config() const override { return config_; }
  int max_batch() const override { return opts_.max_batch; }
  int max_seq_len() const override { return opts_.max_seq_len; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  uint64_t kv_cache_bytes() const override { return model_->kv_cache_bytes(); }

  void forward(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) override {
    validate(chunks);
    const bool decode = std::all_of(chunks.begin(), chunks.end(), [](const SeqChunk& c) { return c.tokens.size() == 1; });
    if (decode && static_cast<int>(chunks.size()) <= max_rows_) {
      decode_step(chunks, logits, argmax);
      return;
    }
    // Prefill (or mixed): pieces of chunks packed into steps of at most max_tokens tokens and max_rows chunk ends.
    const int max_tokens = model_->max_tokens();
    int32_t* meta = model_->meta_host();
    int n = 0;
    std::vector<int> row_chunk;  // chunk index of each logits row of this step
    auto flush = [&] {
      if (n == 0) return;
      model_->upload_meta();
      model_->run(model_->meta_device(n, static_cast<int>(row_chunk.size())));
      collect(row_chunk, logits, argmax);
      n = 0;
      row_chunk.clear();
    };
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const SeqChunk& c = chunks[ci];
      for (size_t k = 0; k < c.tokens.size(); ++k) {
        if (n == max_tokens) flush();
        meta[n] = c.tokens[k];
        meta[max_tokens + n] = c.slot;
        meta[2 * max_tokens + n] = c.start_pos + static_cast<int>(k);
        if (k + 1 == c.tokens.size()) {
          meta[3 * max_tokens + row_chunk.size()] = n;
          row_chunk.push_back(static_cast<int>(ci));
        }
        ++n;
        if (static_cast<int>(row_chunk.size()) == max_rows_) flush();
      }
    }
    flush();
  }

 private:
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
      for (int32_t t : c.tokens)
        TPS_CHECK(t >= 0 && t < config_.vocab_size,
                  "cuda runner: token id " + std::to_string(t) + " is outside the vocabulary (" +
                      std::to_string(config_.vocab_size) + ")",
                  "check the tokenizer matches the model");
    }
  }

  /// One token per chunk: pad to a bucket (padding tokens write the scratch slot) and replay its graph.
  void decode_step(const std::vector<SeqChunk>& chunks, float* logits, int32_t* argmax) {
    const int n = static_cast<int>(chunks.size());
    const int b = bucket_for(n);
    const int max_tokens = model_->max_tokens();
    int32_t* meta = model_->meta_host();
    for (int i = 0; i < b; ++i) {
      const bool real = i < n;
      meta[i] = real ? chunks[i].tokens[0] : 0;
      meta[max_tokens + i] = real ? chunks[i].slot : opts_.max_batch;
      meta[2 * max_tokens + i] = real ? chunks[i].start_pos : 0;
      meta[3 * max_tokens + i] = i;
    }
    model_->upload_meta();
    const StepMeta m = model_->meta_device(b, b, /*decode=*/true);
    auto it = graphs_.find(b);
    if (it != graphs_.end()) {
      TPS_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    } else {
      model_->run(m);  // eager: also creates the cuBLASLt plans the capture needs
      if (use_graphs_) capture(b, m);
    }
    std::vector<int> row_chunk(n);
    for (int i = 0; i < n; ++i) row_chunk[i] = i;
    collect(row_chunk, logits, argmax, b);
  }

  void capture(int b, const StepMeta& m) {
    cudaGraph_t graph = nullptr;
    TPS_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      model_->run(m);
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
    graphs_[b] = exec;
  }

  void disable_graphs(const std::string& why) {
    use_graphs_ = false;
    std::fprintf(stderr, "warning: tp_rank %d: CUDA graphs disabled (%s); decode runs eagerly\n", tp_rank_, why.c_str());
  }

  /// Gather this step's rows over ranks and write them to the caller's outputs. `rows` = rows computed
  /// (>= row_chunk.size() when a decode bucket was padded).
  void collect(const std::vector<int>& row_chunk, float* logits, int32_t* argmax, int rows = -1) {
    const int r = rows < 0 ? static_cast<int>(row_chunk.size()) : rows;
    if (r == 0) {  // a middle piece of a long prompt: nothing to gather (same on every rank), but the
      nccl_->synchronize();  // pinned metadata buffer may only be rewritten once its copy has run
      return;
    }
    const size_t vpr = layout_.vocab_size_per_rank;
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
    nccl_->synchronize();
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
  CudaRunnerOptions opts_;
  Communicator& comm_;
  NcclCommunicator* nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  TpLayout layout_;
  ModelWeights weights_;
  int max_rows_ = 1;
  uint64_t weight_bytes_ = 0;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<CustomAllReduce> car_;
  float* gathered_logits_ = nullptr;
  ArgmaxPair* gathered_pairs_ = nullptr;
  float* host_logits_ = nullptr;
  ArgmaxPair* host_pairs_ = nullptr;
  bool use_graphs_ = true;
  std::map<int, cudaGraphExec_t> graphs_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const Manifest& manifest, int tp_rank, int tp_size,
                                              const WeightArena& weights, Communicator& comm,
                                              const CudaRunnerOptions& opts) {
  return std::make_unique<CudaRunner>(manifest, tp_rank, tp_size, weights, comm, opts);
}

}  // namespace tpshard::cuda
