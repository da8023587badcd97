// devices.hpp: one worker per GPU (docs/ci.md#every-device-of-a-machine).
//
//  - `check --devices 0,1,...` starts one child `check` per listed device, each
//    with CUDA_VISIBLE_DEVICES set to its device alone and `--shard i/N`, so the
//    children draw disjoint shares of the same run; the parent merges their
//    reports (merge_reports) into the one report, JUnit file and annotations a
//    single run would write.
//  - A conformance binary under ctest with RESOURCE_GROUPS
//    (attn_oracle_add_conformance(... GPUS N)) reads the GPUs ctest allocated
//    to the test (CTEST_RESOURCE_GROUP_*) and makes only those visible.
//
// Both honour an outer CUDA_VISIBLE_DEVICES, the list a job was given: a device
// is then an index into that list (device 1 of "3,5" is 5), never a physical
// id the job was not given. Without one, a device is passed as written (an
// index, a GPU-UUID or a MIG id).
//
// Tested by tests/devices_test.cpp with fake device lists (no GPU needed).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "attn_oracle/harness/check.hpp"
#include "attn_oracle/model/environment.hpp"
#include "attn_oracle/model/error.hpp"

namespace attn_oracle::inline harness {

// The CUDA_VISIBLE_DEVICES value of each worker: "0,1" over an outer list
// (nullptr or "" when unset). Errors name the device and the outer list: an
// empty or repeated entry, an index the outer list does not have.
Expected<std::vector<std::string>> device_assignment(const std::string& devices, const char* outer_visible);

// The GPUs ctest allocated to this test, from CTEST_RESOURCE_GROUP_COUNT and
// CTEST_RESOURCE_GROUP_<i>_GPUS ("id:3,slots:1"), as a CUDA_VISIBLE_DEVICES
// value over the outer list; nullopt when ctest allocated none. A conformance
// binary's main makes it the process's CUDA_VISIBLE_DEVICES before any CUDA call.
Expected<std::optional<std::string>> ctest_gpu_allocation(const Environment& environment);

// check --devices: the children, their merged report; the exit status `check` returns.
int run_check_on_devices(const CheckOptions& options, const CheckEnvironment& env);

}  // namespace attn_oracle::harness
