// core_module.cpp: attn_oracle._core, the nanobind extension of the Python
// package: the float64 oracle (oracle_bindings.cpp, kv_buffer_bindings.cpp), case files
// (case_bindings.cpp), the tolerance rule (tolerance_bindings.cpp) and the
// convention adapters (adapter_bindings.cpp). Its
// functions take positional arguments in the layouts of the C++ API; the
// documented surface is the pure-Python modules around it (docs/python.md).
// The module's init is a program's edge: the process-wide limits come from
// ATTN_ORACLE_MEMORY_BUDGET and ATTN_ORACLE_THREADS, read once, at import
// (environment.hpp).
#include <nanobind/stl/string.h>

#include "arrays.hpp"
#include "attn_oracle/model/memory_budget.hpp"
#include "attn_oracle/model/environment.hpp"

NB_MODULE(_core, m) {
  namespace py = attn_oracle::python;
  attn_oracle::install_process_limits(attn_oracle::process_limits_from(attn_oracle::read_environment()));
  m.doc() = "attn-oracle's C++ oracle, case files and tolerance rule (see attn_oracle.oracle, .cases, .tolerance)";
  py::bind_oracle(m);
  py::bind_cases(m);
  py::bind_tolerance(m);
  py::bind_adapters(m);
  py::bind_kv_buffer(m);
  m.def("memory_budget", &attn_oracle::memory_budget);
  m.def("set_memory_budget", [](int64_t bytes) {
    if (bytes < 1) py::raise(attn_oracle::ErrorCode::over_memory_budget, "the memory budget must be positive");
    attn_oracle::set_memory_budget(bytes);
  });
  m.attr("VERSION") = ATTN_ORACLE_VERSION;
}
