// attn_oracle_main.cpp: the attn-oracle program: the harness's verbs (cli.hpp)
// with every backend this build ships registered (builtin_backends.hpp), and
// the versions its report names. Its edge: the environment is read here, once
// (environment.hpp), into the settings the verbs run with (settings.hpp);
// ATTN_ORACLE_PROGRAM renames the program in the replay and rerun lines it
// prints (`python -m attn_oracle` sets it to itself, so that the lines run as
// printed). Tested by tests/cli_test.cpp.
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
  const attn_oracle::Environment environment = attn_oracle::read_environment();
  attn_oracle::CheckEnvironment env;
  env.settings = attn_oracle::resolve_settings(environment);
  attn_oracle::install_process_settings(env.settings);
  attn_oracle::register_builtin_backends();
  env.program = attn_oracle::environment_value(environment, "ATTN_ORACLE_PROGRAM", "attn-oracle");
  env.versions = {{"CUDA", ATTN_ORACLE_CUDA_VERSION},
                  {"cuDNN", ATTN_ORACLE_CUDNN_VERSION},
                  {"device", attn_oracle::production_device()}};
  env.backends_note = attn_oracle::builtin_backends_note();
  env.fixtures_dir = ATTN_ORACLE_FIXTURES_DIR;
  return attn_oracle::run_cli(std::vector<std::string>(argv + 1, argv + argc), env);
}
