#include "weir/inference/cuda/cuda_plan.hpp"

#include <algorithm>
#include <cstdio>

namespace weir::inference::cuda {

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : "fp32";
}

std::size_t activation_workspace_bytes(const ActivationShape& s) {
  const std::size_t t = static_cast<std::size_t>(std::max<std::int64_t>(s.max_batch_tokens, 1));
  const std::size_t dim = static_cast<std::size_t>(s.dim),
                    hidden = static_cast<std::size_t>(s.hidden);
  const std::size_t q_dim = static_cast<std::size_t>(s.n_heads) * s.head_dim;
  const std::size_t kv_dim = static_cast<std::size_t>(s.n_kv_heads) * s.head_dim;
  // x, xb, proj: [t, dim]; q, att: [t, q_dim]; k, v: [t, kv_dim]; h1, h2: [t, hidden];
  // logits: [min(t, max_logit_rows), n_vocab] (more rows are computed in chunks).
  const std::size_t rows =
      s.max_logit_rows > 0 ? std::min(t, static_cast<std::size_t>(s.max_logit_rows)) : t;
  std::size_t floats = t * (3 * dim + 2 * q_dim + 2 * kv_dim + 2 * hidden) +
                       rows * static_cast<std::size_t>(s.n_vocab);
  floats += attention_partial_floats(s.sm_count, s.head_dim);
  std::size_t bytes = floats * sizeof(float);
  if (s.precision == Precision::bf16)  // the BF16 copy of the widest GEMM input
    bytes += t * std::max({dim, q_dim, hidden}) * sizeof(std::uint16_t);
  bytes += 6 * t * sizeof(std::int32_t);  // tokens, positions, seq_index, logit_rows, tiles
  return bytes + kCublasWorkspaceBytes;
}

namespace {
std::string mib(long double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0Lf MiB", bytes / (1024.0L * 1024.0L));
  return buf;
}
}  // namespace

Result<MemoryPlan> plan_memory(std::size_t free_bytes, double fraction, std::size_t weight_bytes,
                               std::size_t workspace_bytes, std::size_t min_kv_bytes) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return Error(Errc::invalid_argument,
                 "the GPU memory fraction must be in (0, 1], got " + std::to_string(fraction));
  }
  MemoryPlan p;
  p.usable_bytes = static_cast<std::size_t>(static_cast<long double>(free_bytes) * fraction);
  p.weight_bytes = weight_bytes;
  p.workspace_bytes = workspace_bytes;
  const long double left =
      static_cast<long double>(p.usable_bytes) - weight_bytes - workspace_bytes;
  if (left < static_cast<long double>(min_kv_bytes) || left <= 0) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f%%", fraction * 100.0);
    return Error(
        Errc::memory_budget_exceeded,
        "the model does not fit in GPU memory: " + std::string(pct) + " of " + mib(free_bytes) +
            " free is " + mib(p.usable_bytes) + "; weights " + mib(weight_bytes) +
            " and activation workspace " + mib(workspace_bytes) + " leave " + mib(left) +
            " for the KV cache, which needs at least " + mib(min_kv_bytes) +
            " (lower max_batch_tokens, use a smaller or quantised model, or --device cpu)");
  }
  p.kv_bytes = static_cast<std::size_t>(left);
  return p;
}

AttentionSplit plan_attention_split(long long token_heads, long long max_context, int sm_count) {
  if (token_heads <= 0 || sm_count <= 0 || max_context < kSplitMinContext) return {};
  const long long target = static_cast<long long>(sm_count) * kSplitBlocksPerSm;
  if (token_heads >= target) return {};
  const long long by_work = (target + token_heads - 1) / token_heads;
  const long long by_len = max_context / kSplitMinChunk;
  long long s = std::min({by_work, by_len, static_cast<long long>(kSplitMaxSplits)});
  if (s <= 1) return {};
  const long long chunk = (max_context + s - 1) / s;
  s = (max_context + chunk - 1) / chunk;  // no empty trailing split
  if (s <= 1) return {};
  return {static_cast<int>(s), static_cast<int>(chunk)};
}

std::size_t attention_partial_floats(int sm_count, int head_dim) {
  if (sm_count <= 0) return 0;
  // token_heads x splits < target + token_heads <= 2 x target (see plan_attention_split).
  return std::size_t{2} * static_cast<std::size_t>(sm_count) * kSplitBlocksPerSm *
         (static_cast<std::size_t>(head_dim) + 2);
}

int build_prefill_tiles(const std::int32_t* positions, const std::int32_t* seq_index, int n,
                        std::vector<std::int32_t>& out) {
  out.clear();
  for (int i = 0; i < n;) {
    int c = 1;
    while (i + c < n && c < kPrefillTile && seq_index[i + c] == seq_index[i] &&
           positions[i + c] == positions[i] + c)
      ++c;
    out.push_back(i);
    out.push_back(c);
    i += c;
  }
  return static_cast<int>(out.size() / 2);
}

int table_stride_for(int max_blocks, int cap) {
  int s = 4;
  while (s < max_blocks) s *= 2;
  if (cap > 0) s = std::min(s, cap);
  return std::max(s, max_blocks);
}

std::optional<GraphKey> decode_graph_key(int n_tokens, int n_seqs, int logit_rows, int table_stride,
                                         int max_graph_tokens) {
  if (n_tokens <= 0 || n_tokens != n_seqs || n_tokens > max_graph_tokens) return std::nullopt;
  if (logit_rows < 0 || logit_rows > n_tokens || table_stride <= 0) return std::nullopt;
  return GraphKey{n_tokens, n_seqs, table_stride, logit_rows};
}

}  // namespace weir::inference::cuda
