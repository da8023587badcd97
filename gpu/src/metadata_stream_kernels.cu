// metadata_stream_kernels.cu: the token-parallel metadata kernels (the steps of
// metadata_tokens.hpp), asynchronous on one stream with a caller's workspace.
//
//   init       tile status of the scan, the status record, the row keys and
//              the [rows, 2, M] tables
//   tokens     one thread per token, tiles of kTileTokens across blocks whatever the
//              row lengths: check_token, then the run starts counted by a block scan
//              (cub::BlockScan) and across tiles by decoupled look-back
//              (cub::TilePrefixCallbackOp, the single-pass scan of cub::DeviceScan),
//              so run k's first and last token land at index k in one pass
//   runs       index_run for every run, then check_reappearance (grid-stride over
//              the run count the tokens kernel left on the device)
//   slots      slot_document per (row, slot); cub::DeviceScan over the slot totals;
//              scatter_slot
//              and, in the same kernel, the documents' count and the trailing
//              offsets, or the first row's error with its values (row_error_of)
// Nothing here waits for the host: counts stay on the device, and grid-stride
// kernels sized for the worst case return at once past the real count.
// The CPU twin (metadata_twin.cpp) runs the same steps in loops; tests compare both
// integer for integer on a device (metadata_twin_test.cpp), skipped without one.
// Also device_present, which every CUDA entry point asks first.
#include <cuda_runtime.h>

#include <cub/agent/single_pass_scan_operators.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

#include <algorithm>
#include <string>

#include "device_array.cuh"
#include "event_timer.cuh"

#include "attn_oracle/gpu/metadata_device.hpp"
#include "attn_oracle/gpu/metadata_tokens.hpp"

namespace attn_oracle::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kRounds = 8;  // tokens per thread; a tile is kThreads * kRounds tokens
constexpr int64_t kTileTokens = int64_t(kThreads) * kRounds;
constexpr int kMaxGridBlocks = 4096;  // grid-stride kernels: enough to fill any current GPU
constexpr unsigned kRunBlocks = 264;  // the runs kernels: 2 blocks per SM of an H100

using RunCount = long long;
using TileState = cub::ScanTileState<RunCount>;
using Plus = ::cuda::std::plus<RunCount>;
using TilePrefix = cub::TilePrefixCallbackOp<RunCount, Plus, TileState>;
using BlockScan = cub::BlockScan<RunCount, kThreads>;

struct DeviceOps {
  using Word = unsigned long long;
  __device__ static uint64_t load(const uint64_t* a) { return *reinterpret_cast<const volatile Word*>(a); }
  __device__ static uint64_t cas(uint64_t* a, uint64_t expected, uint64_t desired) {
    return atomicCAS(reinterpret_cast<Word*>(a), Word(expected), Word(desired));
  }
  __device__ static void min(uint64_t* a, uint64_t v) { atomicMin(reinterpret_cast<Word*>(a), Word(v)); }
  __device__ static void max(uint64_t* a, uint64_t v) { atomicMax(reinterpret_cast<Word*>(a), Word(v)); }
};

struct AddTotals {
  __host__ __device__ SlotTotals operator()(const SlotTotals& a, const SlotTotals& b) const { return a + b; }
};

// The counts the kernels leave for each other, and what the caller reads back.
struct DeviceStatus {
  uint64_t runs, large_runs, error_row;  // error_row: kNoKey when every row is valid
  MetadataStatus out;
};

// Byte offsets of the workspace's parts, each 256-byte aligned.
struct Layout {
  int64_t total_tokens = 0, slots = 0;
  int num_tiles = 0;
  size_t status = 0, tiles = 0, row_keys = 0, first_tab = 0, last_tab = 0, run_first = 0, run_last = 0, hash = 0,
         slot_docs = 0, slot_totals = 0, slot_base = 0, scan_temp = 0, scan_bytes = 0, tiles_bytes = 0, bytes = 0;
};

size_t take(size_t& at, size_t bytes) {
  const size_t here = at;
  at += (bytes + 255) / 256 * 256;
  return here;
}

Layout layout_of(const MetadataParams& p) {
  Layout l;
  l.total_tokens = p.rows * (p.q.len + p.kv.len);
  l.slots = p.rows * p.max_segments;
  l.num_tiles = static_cast<int>((l.total_tokens + kTileTokens - 1) / kTileTokens);
  TileState::AllocationSize(std::max(l.num_tiles, 1), l.tiles_bytes);
  cub::DeviceScan::ExclusiveScan(nullptr, l.scan_bytes, static_cast<SlotTotals*>(nullptr),
                                 static_cast<SlotTotals*>(nullptr), AddTotals{}, SlotTotals{}, l.slots);
  const size_t table = size_t(p.rows) * 2 * p.max_segments * sizeof(uint64_t);
  size_t at = 0;
  l.status = take(at, sizeof(DeviceStatus));
  l.tiles = take(at, l.tiles_bytes);
  l.row_keys = take(at, size_t(p.rows) * sizeof(uint64_t));
  l.first_tab = take(at, table);
  l.last_tab = take(at, table);
  l.run_first = take(at, size_t(l.total_tokens) * sizeof(int64_t));
  l.run_last = take(at, size_t(l.total_tokens) * sizeof(int64_t));
  l.hash = take(at, (2 * size_t(l.total_tokens) + 1) * sizeof(uint64_t));
  l.slot_docs = take(at, size_t(l.slots) * sizeof(SlotDoc));
  l.slot_totals = take(at, size_t(l.slots) * sizeof(SlotTotals));
  l.slot_base = take(at, size_t(l.slots) * sizeof(SlotTotals));
  l.scan_temp = take(at, std::max<size_t>(l.scan_bytes, 1));
  l.bytes = at;
  return l;
}

// The workspace's parts as pointers, passed to every kernel by value.
struct Work {
  DeviceStatus* status;
  RunTables tables;  // runs and hash_capacity read from the status inside the kernels
  int64_t* run_first;
  int64_t* run_last;
  SlotDoc* slot_docs;
  SlotTotals* slot_totals;
  SlotTotals* slot_base;
};

Work work_of(const Layout& l, void* workspace) {
  char* base = static_cast<char*>(workspace);
  Work w;
  w.status = reinterpret_cast<DeviceStatus*>(base + l.status);
  w.run_first = reinterpret_cast<int64_t*>(base + l.run_first);
  w.run_last = reinterpret_cast<int64_t*>(base + l.run_last);
  w.tables.run_first = w.run_first, w.tables.run_last = w.run_last;
  w.tables.first_tab = reinterpret_cast<uint64_t*>(base + l.first_tab);
  w.tables.last_tab = reinterpret_cast<uint64_t*>(base + l.last_tab);
  w.tables.hash = reinterpret_cast<uint64_t*>(base + l.hash);
  w.tables.row_keys = reinterpret_cast<uint64_t*>(base + l.row_keys);
  w.tables.error_row = &w.status->error_row;
  w.slot_docs = reinterpret_cast<SlotDoc*>(base + l.slot_docs);
  w.slot_totals = reinterpret_cast<SlotTotals*>(base + l.slot_totals);
  w.slot_base = reinterpret_cast<SlotTotals*>(base + l.slot_base);
  return w;
}

__device__ RunTables tables_now(const Work& w) {
  RunTables r = w.tables;
  r.runs = int64_t(w.status->runs);
  r.hash_capacity = w.status->large_runs > 0 ? 2 * w.status->large_runs + 1 : 0;
  return r;
}

__device__ int64_t grid_thread() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

// ------------------------------------------------------------------ init
// Also the row keys and the first-token table (kNoKey) and the last-token table (0).
__global__ void init_kernel(Work w, TileState tiles, int num_tiles, int64_t rows, int64_t table) {
  tiles.InitializeStatus(num_tiles);  // one tile per thread: the grid covers them all
  for (int64_t i = grid_thread(); i < rows; i += grid_stride()) w.tables.row_keys[i] = kNoKey;
  for (int64_t i = grid_thread(); i < table; i += grid_stride()) w.tables.first_tab[i] = kNoKey, w.tables.last_tab[i] = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    w.status->runs = w.status->large_runs = 0;
    w.status->error_row = kNoKey;
    w.status->out = MetadataStatus{};
  }
}

// ------------------------------------------------------------------ 1 tokens
// Thread i of tile b takes tokens b * kTileTokens + j * kThreads + i, j < kRounds:
// each round's loads are coalesced, and a round is a contiguous stretch of the
// stream, so the per-round block scans chain in stream order. Every round's
// tokens are checked before the first scan, so their loads are in flight together.
__global__ void __launch_bounds__(kThreads) tokens_kernel(MetadataParams p, Work w, TileState tiles,
                                                          int64_t total) {
  __shared__ typename BlockScan::TempStorage scan;
  __shared__ typename TilePrefix::TempStorage look_back;
  __shared__ RunCount tile_prefix;
  const int tile = blockIdx.x;
  const int64_t base = int64_t(tile) * kTileTokens, row_tokens = p.q.len + p.kv.len;
  StreamCursor c = cursor_at(base + threadIdx.x, row_tokens);
  int64_t ref_row = -1;
  int ref_side = -1;
  RowRef ref{nullptr, nullptr, 0};
  unsigned char ends[kRounds];  // bit 0: starts a run, bit 1: ends one
#pragma unroll
  for (int j = 0; j < kRounds; ++j) {
    const int64_t g = base + int64_t(j) * kThreads + threadIdx.x;
    ends[j] = 0;
    if (g < total) {
      const StreamToken s = stream_token(p, c);
      if (s.row != ref_row || s.side != ref_side) ref = side_ref(p, s.row, s.side), ref_row = s.row, ref_side = s.side;
      const TokenCheck check = check_token(ref, s.t, p.max_segments, p.mask);
      if (check.code >= 0) note_error<DeviceOps>(w.tables, s.row, s.side, check.code, s.t);
      if (check.run_start && ref.ids[s.t] > p.max_segments)
        atomicAdd(reinterpret_cast<unsigned long long*>(&w.status->large_runs), 1ull);
      ends[j] = static_cast<unsigned char>(check.run_start | (check.run_end << 1));
    }
    advance(c, kThreads, row_tokens);
  }
  RunCount before[kRounds];  // run starts before the token in this tile
  RunCount running = 0;
#pragma unroll
  for (int j = 0; j < kRounds; ++j) {
    RunCount aggregate;
    BlockScan(scan).ExclusiveSum(RunCount(ends[j] & 1), before[j], aggregate);
    before[j] += running;
    running += aggregate;
    __syncthreads();  // the scan storage is reused by the next round
  }
  if (tile == 0) {
    if (threadIdx.x == 0) {
      tiles.SetInclusive(0, running);
      tile_prefix = 0;
    }
  } else if (threadIdx.x < 32) {  // the look-back is one warp's work
    TilePrefix op(tiles, look_back, Plus{}, tile);
    const RunCount exclusive = op(running);
    if (threadIdx.x == 0) tile_prefix = exclusive;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kRounds; ++j) {
    const int64_t g = base + int64_t(j) * kThreads + threadIdx.x;
    const RunCount k = tile_prefix + before[j];
    if (ends[j] & 1) w.run_first[k] = g;
    if (ends[j] & 2) w.run_last[k + (ends[j] & 1) - 1] = g;
  }
  if (tile == gridDim.x - 1 && threadIdx.x == 0) w.status->runs = uint64_t(tile_prefix + running);
}

// ------------------------------------------------------------------ 2 runs
__global__ void hash_init_kernel(Work w) {
  const RunTables r = tables_now(w);
  for (int64_t i = grid_thread(); i < int64_t(r.hash_capacity); i += grid_stride()) r.hash[i] = kNoKey;
}

__global__ void runs_index_kernel(MetadataParams p, Work w) {
  const RunTables r = tables_now(w);
  for (int64_t k = grid_thread(); k < r.runs; k += grid_stride()) index_run<DeviceOps>(p, r, k);
}

__global__ void runs_reappear_kernel(MetadataParams p, Work w) {
  const RunTables r = tables_now(w);
  for (int64_t k = grid_thread(); k < r.runs; k += grid_stride()) check_reappearance<DeviceOps>(p, r, k);
}

// ------------------------------------------------------------------ 3 slots
__global__ void slots_kernel(MetadataParams p, Work w, int64_t slots) {
  const bool failed = w.status->error_row != kNoKey;  // the call's result is the error: no outputs
  for (int64_t i = grid_thread(); i < slots; i += grid_stride()) {
    if (failed) {
      w.slot_totals[i] = SlotTotals{};
      continue;
    }
    const SlotDoc d = slot_document(p, i / p.max_segments, i % p.max_segments, w.tables.first_tab, w.tables.last_tab);
    w.slot_docs[i] = d;
    w.slot_totals[i] = slot_totals(d);
  }
}

// The documents' count and the trailing offsets, or the first row's error.
__device__ void finish(const MetadataParams& p, const CompactionParams& c, const Work& w, int64_t slots) {
  MetadataStatus& out = w.status->out;
  if (w.status->error_row != kNoKey) {
    const int64_t row = int64_t(w.status->error_row);
    out.error_row = row;
    out.error = row_error_of(p, tables_now(w), row);
    return;
  }
  const int64_t docs = slots == 0 ? 0 : w.slot_base[slots - 1].docs + w.slot_totals[slots - 1].docs;
  c.cu_seqlens_q[0] = c.cu_seqlens_kv[0] = 0;
  c.ragged_offsets_q[docs] = p.rows * p.q.len;
  c.ragged_offsets_kv[docs] = p.rows * p.kv.len;
  out.documents = docs;
  out.error_row = -1;
}

__global__ void scatter_kernel(MetadataParams p, CompactionParams c, Work w, int64_t slots) {
  if (grid_thread() == 0) finish(p, c, w, slots);  // reads only what the scan wrote
  if (w.status->error_row != kNoKey) return;
  const int64_t M = p.max_segments;
  for (int64_t i = grid_thread(); i < slots; i += grid_stride())
    scatter_slot(p, c, i / M, w.slot_docs[i], w.slot_base[i], w.slot_base[(i / M) * M]);
}

unsigned grid_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxGridBlocks));
}

std::string launch_failure(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(what) + ": " + cudaGetErrorString(e);
}

// The enqueue captured into a CUDA graph once and replayed (the launch gaps of ten
// small kernels shrink): the median replay, < 0 on a failure.
float graph_replay_ms(const MetadataParams& p, const MetadataStreamOutputs& o, DeviceArray<char>& workspace, int reps);

}  // namespace

bool device_present(std::string* name, std::string* arch) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  cudaDeviceProp prop{};
  if ((name || arch) && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    if (name) *name = prop.name;
    if (arch) *arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  }
  return true;
}

int64_t metadata_max_documents(const MetadataParams& p) {
  return p.rows * std::min({p.max_segments, p.q.len, p.kv.len});
}

size_t metadata_workspace_bytes(const MetadataParams& p) { return layout_of(p).bytes; }

std::string metadata_enqueue(const MetadataParams& device_params, const MetadataStreamOutputs& out, void* workspace,
                             size_t workspace_bytes, void* stream_handle) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const Layout l = layout_of(device_params);
  if (workspace_bytes < l.bytes)
    return "metadata workspace of " + std::to_string(workspace_bytes) + " B, needs " + std::to_string(l.bytes);
  MetadataParams p = device_params;
  p.q_seqlens = out.q_seqlens, p.kv_seqlens = out.kv_seqlens, p.q_offsets = out.q_offsets, p.kv_offsets = out.kv_offsets;
  CompactionParams c;
  c.cu_seqlens_q = out.cu_seqlens_q, c.cu_seqlens_kv = out.cu_seqlens_kv;
  c.ragged_offsets_q = out.ragged_offsets_q, c.ragged_offsets_kv = out.ragged_offsets_kv;
  const Work w = work_of(l, workspace);
  TileState tiles;
  if (tiles.Init(std::max(l.num_tiles, 1), static_cast<char*>(workspace) + l.tiles, l.tiles_bytes) != cudaSuccess)
    return "metadata tile state";
  char* base = static_cast<char*>(workspace);
  const int64_t table = p.rows * 2 * p.max_segments;
  const unsigned init_grid = std::max<unsigned>(grid_for(std::max(p.rows, table)), (l.num_tiles + kThreads - 1) / kThreads);
  init_kernel<<<init_grid, kThreads, 0, stream>>>(w, tiles, l.num_tiles, p.rows, table);
  if (l.num_tiles > 0) tokens_kernel<<<l.num_tiles, kThreads, 0, stream>>>(p, w, tiles, l.total_tokens);
  // A valid batch has one run per document: these grids are small, and a
  // run-heavy (invalid) one is strided over them.
  const unsigned run_grid = std::min(grid_for(l.total_tokens), kRunBlocks);
  hash_init_kernel<<<run_grid, kThreads, 0, stream>>>(w);
  runs_index_kernel<<<run_grid, kThreads, 0, stream>>>(p, w);
  runs_reappear_kernel<<<run_grid, kThreads, 0, stream>>>(p, w);
  slots_kernel<<<grid_for(l.slots), kThreads, 0, stream>>>(p, w, l.slots);
  if (std::string f = launch_failure("metadata token and run kernels"); !f.empty()) return f;
  size_t scan_bytes = l.scan_bytes;
  if (l.slots > 0 && cub::DeviceScan::ExclusiveScan(base + l.scan_temp, scan_bytes, w.slot_totals, w.slot_base,
                                                    AddTotals{}, SlotTotals{}, l.slots, stream) != cudaSuccess)
    return launch_failure("metadata slot scan");
  scatter_kernel<<<grid_for(l.slots), kThreads, 0, stream>>>(p, c, w, l.slots);
  return launch_failure("metadata slot kernels");
}

bool metadata_read_status(const void* workspace, void* stream_handle, MetadataStatus& status, std::string& failure) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const auto* s = static_cast<const DeviceStatus*>(workspace);  // the status is the workspace's first part
  if (cudaMemcpyAsync(&status, &s->out, sizeof(MetadataStatus), cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    failure = std::string("metadata status: ") + cudaGetErrorString(cudaGetLastError());
    return false;
  }
  return true;
}

bool metadata_stream_on_device(const MetadataParams& host_params, const InputSizes& sizes, DeviceMetadataOutputs& out,
                               int timing_reps) {
  auto fail = [&](const std::string& what) {
    out.failure = what;
    return false;
  };
  MetadataParams p = host_params;
  const int64_t rows = p.rows, M = p.max_segments, capacity = metadata_max_documents(p) + 1;
  DeviceArray<int64_t> q_ids(sizes.q_ids), q_pos(sizes.q_pos), kv_ids(sizes.kv_ids), kv_pos(sizes.kv_pos);
  if (!q_ids.ok() || !q_pos.ok() || !kv_ids.ok() || !kv_pos.ok() || !q_ids.upload(p.q.ids) || !q_pos.upload(p.q.pos) ||
      !kv_ids.upload(p.kv.ids) || !kv_pos.upload(p.kv.pos))
    return fail("metadata inputs: allocation or upload");
  p.q.ids = q_ids.ptr, p.q.pos = q_pos.ptr, p.kv.ids = kv_ids.ptr, p.kv.pos = kv_pos.ptr;
  DeviceArray<int64_t> q_seqlens(rows * M), kv_seqlens(rows * M), q_offsets(rows * (M + 1)), kv_offsets(rows * (M + 1));
  DeviceArray<int64_t> cu_q(capacity), cu_kv(capacity), ragged_q(capacity), ragged_kv(capacity);
  DeviceArray<char> workspace(metadata_workspace_bytes(p));
  if (!q_seqlens.ok() || !kv_seqlens.ok() || !q_offsets.ok() || !kv_offsets.ok() || !cu_q.ok() || !cu_kv.ok() ||
      !ragged_q.ok() || !ragged_kv.ok() || !workspace.ok())
    return fail("metadata outputs or workspace: allocation");
  const MetadataStreamOutputs o{q_seqlens.ptr, kv_seqlens.ptr, q_offsets.ptr, kv_offsets.ptr,
                                cu_q.ptr,      cu_kv.ptr,      ragged_q.ptr,  ragged_kv.ptr};
  if (std::string f = metadata_enqueue(p, o, workspace.ptr, workspace.size, nullptr); !f.empty()) return fail(f);
  MetadataStatus status;
  if (!metadata_read_status(workspace.ptr, nullptr, status, out.failure)) return false;
  if (status.error_row >= 0) {
    out.error_row = status.error_row;
    out.error = status.error;
    return true;
  }
  auto first = [](const DeviceArray<int64_t>& a, int64_t n, std::vector<int64_t>& to) {
    to.resize(n);
    return cudaMemcpy(to.data(), a.ptr, n * sizeof(int64_t), cudaMemcpyDeviceToHost) == cudaSuccess;
  };
  const int64_t n = status.documents + 1;
  if (!q_seqlens.download(out.q_seqlens) || !kv_seqlens.download(out.kv_seqlens) ||
      !q_offsets.download(out.q_offsets) || !kv_offsets.download(out.kv_offsets) || !first(cu_q, n, out.cu_seqlens_q) ||
      !first(cu_kv, n, out.cu_seqlens_kv) || !first(ragged_q, n, out.ragged_offsets_q) ||
      !first(ragged_kv, n, out.ragged_offsets_kv))
    return fail("metadata outputs: download");
  if (timing_reps > 0) {
    std::string failure;
    out.kernels_ms = median_event_ms(timing_reps, [&] {
      failure = metadata_enqueue(p, o, workspace.ptr, workspace.size, nullptr);
      return failure.empty();
    });
    const size_t elems[4] = {sizes.q_ids, sizes.q_pos, sizes.kv_ids, sizes.kv_pos};
    const int64_t* from[4] = {p.q.ids, p.q.pos, p.kv.ids, p.kv.pos};
    DeviceArray<int64_t> to(elems[0] + elems[1] + elems[2] + elems[3]);
    out.copy_ms = median_event_ms(timing_reps, [&] {
      int64_t* at = to.ptr;
      bool ok = true;
      for (int i = 0; i < 4; ++i) {
        ok &= cudaMemcpyAsync(at, from[i], elems[i] * sizeof(int64_t), cudaMemcpyDeviceToDevice) == cudaSuccess;
        at += elems[i];
      }
      return ok;
    });
    out.copy_bytes = 2.0 * sizeof(int64_t) * double(to.size);
    out.graph_ms = graph_replay_ms(p, o, workspace, timing_reps);
    if (out.kernels_ms < 0 || out.copy_ms < 0 || out.graph_ms < 0) return fail("metadata timing: " + failure);
  }
  return true;
}

namespace {

float graph_replay_ms(const MetadataParams& p, const MetadataStreamOutputs& o, DeviceArray<char>& workspace, int reps) {
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return -1.0f;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  float ms = -1.0f;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    const std::string f = metadata_enqueue(p, o, workspace.ptr, workspace.size, stream);
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && f.empty() &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      ms = median_event_ms(reps, [&] { return cudaGraphLaunch(exec, stream) == cudaSuccess; }, stream);
    }
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return ms;
}

}  // namespace

}  // namespace attn_oracle::gpu
