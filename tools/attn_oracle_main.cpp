// attn_oracle_main.cpp: the attn-oracle program: the harness's verbs (cli.hpp)
// with every backend this build ships registered (builtin_backends.hpp), and
// the versions its report names. ATTN_ORACLE_PROGRAM renames the program in the
// replay and rerun lines it prints (`python -m attn_oracle` sets it to itself,
// so that the lines run as printed). Tested by tests/cli_test.cpp.
#include <cstdlib>
#include <string>
#include <vector>

#include "attn_oracle/harness/cli.hpp"
#include "builtin_backends.hpp"

#ifndef ATTN_ORACLE_CUDA_VERSION
#define ATTN_ORACLE_CUDA_VERSION "none"
#endif
#ifndef ATTN_ORACLE_CUDNN_VERSION
#define ATTN_ORACLE_CUDNN_VERSION "none"
#endif

int main(int argc, char** argv) {
  attn_oracle::register_builtin_backends();
  attn_oracle::CheckEnvironment env;
  const char* program = std::getenv("ATTN_ORACLE_PROGRAM");
  env.program = program && *program ? program : "attn-oracle";
  env.versions = {{"CUDA", ATTN_ORACLE_CUDA_VERSION},
                  {"cuDNN", ATTN_ORACLE_CUDNN_VERSION},
                  {"device", attn_oracle::production_device()}};
  env.backends_note = attn_oracle::builtin_backends_note();
  env.fixtures_dir = ATTN_ORACLE_FIXTURES_DIR;
  return attn_oracle::run_cli(std::vector<std::string>(argv + 1, argv + argc), env);
}
