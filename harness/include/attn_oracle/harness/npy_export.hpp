// npy_export.hpp: `attn-oracle export --npy DIR`, the fixture corpus for
// JAX / PyTorch tests that do not read C++ or case files.
//
// For every fixtures/**/NAME.case.json it writes DIR/<relative path without
// .case.json>/<field>.npy, one file per numeric array of the case (inputs:
// q.segment_ids, q.segment_pos, kv.*, tensors.q/k/v/do; attention cases drawn
// from a data seed get their generated, dtype-rounded tensors) and of its
// expected result (expected.o, expected.lse, expected.cu_seqlens_q, ...), and
// DIR/index.json (schema attn-oracle.npy-index/1) listing, per fixture, its op,
// note, scalar attributes, every array's file, dtype and shape, and an expected
// error code where the case is rejected.
//
// Arrays holding only integers are '<i8', others '<f8'; a null in a float
// array (lse of a query that attends nothing) is -inf. Files are NPY 1.0,
// C order, little-endian.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attn_oracle::inline harness {

// NPY 1.0 bytes of a C-order array; `descr` is "<i8" or "<f8", `data` the raw
// little-endian elements.
std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data);

// Exports every fixture under `fixtures_dir` into `out_dir`; returns the exit
// status (0, or 1 after printing why on stderr).
int export_npy(const std::string& fixtures_dir, const std::string& out_dir);

}  // namespace attn_oracle::harness
