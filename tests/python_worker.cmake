# python_worker.cmake: the process backend end to end with Python workers
# (docs/protocol.md), one ctest test per CASE (tests/CMakeLists.txt):
#   numpy_backend_passes      examples/numpy_backend.py passes metadata and attention
#   jax_backend_passes, torch_backend_passes
#                             examples/{jax,torch}_backend.py pass every attention
#                             property (SKIP when PYTHON cannot import the framework)
#   planted_fails_and_replays examples/planted_numpy_backend.py fails, shrinks to a
#                             small case printed in a line, with a repro line, and its
#                             printed replay line exits 3 with the same message
#   crashing_worker, hanging_worker, garbage_worker
#                             each a clean failure of the case with the worker's
#                             stderr in the output and in the report
#   one_worker_per_run        every property on examples/numpy_backend.py starts
#                             one worker: the summary line, the report and the
#                             worker's own log of its starts say so
#   restarts_after_crash      a worker that crashes on some draws: each crash
#                             is a failure of the case, the run goes on with a
#                             restarted worker, and the restarts are counted
#   wrong_protocol_version    a clear error naming both versions, exit 1
#   domain_travels            examples/self_attention_backend.py's domain reaches
#                             the suite through the hello: printed, and the draws
#                             are judged rather than declined
#   bad_domain                a domain with an unknown mask kind: a clear error
#                             naming the key, exit 1
#   kv_buffer_metadata_only  examples/numpy_kv_buffer_metadata_backend.py (kv_micro_sequence
#                             alone) passes the three metadata properties and is
#                             skipped, with the steps named, on the three that call steps
#   kv_buffer_planted_metadata_only
#                             tests/workers/planted_kv_metadata_worker.py fails the same three
#   kv_steps_without_metadata a worker with kv_attend but no kv_micro_sequence: a clear
#                             error naming the missing method, exit 1
#   torch_kv_buffer_passes    examples/torch_kv_buffer_backend.py passes every kv_buffer
#                             property (SKIP when PYTHON cannot import torch)
#   torch_kv_buffer_planted_fails_and_replays
#                             examples/planted_torch_kv_buffer_backend.py fails the three
#                             metadata properties, each shrunk to two one-token documents,
#                             and its printed replay line exits 3 with the same message
#   context_parallel_example_passes
#                             examples/numpy_context_parallel_backend.py passes every
#                             context_parallel property; `eval` of context_parallel cases
#                             prints the reference's permutation and rank metadata, and
#                             `replay` passes them
#   context_parallel_planted_fails
#                             examples/planted_numpy_context_parallel_backend.py (its ring
#                             turns the other way) fails the step properties, rank metadata
#                             and ring steps, and passes the run; it fails the cp = 4 ring
#                             case on its step metadata, and passes the cp = 2 one, where
#                             both ways are one
#   context_parallel_broken_permutation
#                             tests/workers/cp_worker.py's permutations of the wrong shape,
#                             of floats and with a token twice: each a clear failure naming
#                             what was wrong (eval and replay), never a crash
# Prints "SKIP: ..." (the test's SKIP_REGULAR_EXPRESSION) without python3 + numpy.
# Each case costs 2-6 s, mostly Python starting.
#
# cmake -DCASE=... -DCLI=... -DPYTHON=... -DSOURCE_DIR=... -DWORK_DIR=... -P python_worker.cmake
if(NOT PYTHON)
  message("SKIP: no python3 was found at configure time")
  return()
endif()
execute_process(COMMAND ${PYTHON} -c "import numpy" RESULT_VARIABLE no_numpy OUTPUT_QUIET ERROR_QUIET)
if(no_numpy)
  message("SKIP: ${PYTHON} has no numpy (scripts/setup installs it)")
  return()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
set(ENV{PYTHONPATH} "${SOURCE_DIR}/python:${SOURCE_DIR}")
set(ENV{ATTN_ORACLE_FAILURES_DIR} "${WORK_DIR}/failures")
set(ENV{ATTN_ORACLE_JAX_CACHE} "${WORK_DIR}/jax-cache")  # a JAX backend's compilation cache stays in the build tree

# Runs `CLI ARGS...` in the source directory into out, err, rc.
if(NOT RUN_TIMEOUT)
  set(RUN_TIMEOUT 120)
endif()
function(run)
  execute_process(COMMAND ${CLI} ${ARGN} WORKING_DIRECTORY ${SOURCE_DIR} TIMEOUT ${RUN_TIMEOUT}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
  set(rc "${rc}" PARENT_SCOPE)
endfunction()

function(expect what pattern text)
  string(REGEX MATCH "${pattern}" found "${text}")
  if(NOT found)
    message(FATAL_ERROR "${CASE}: ${what}: no match for `${pattern}` in:\n${text}")
  endif()
endfunction()

function(expect_rc want)
  if(NOT rc STREQUAL "${want}")
    message(FATAL_ERROR "${CASE}: exit ${rc}, expected ${want}:\n${out}\n${err}")
  endif()
endfunction()

function(check_worker worker filter cases)
  run(check --backend "exec:${worker}" --filter ${filter} --cases ${cases} --report ${WORK_DIR}/report)
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
  set(rc "${rc}" PARENT_SCOPE)
endfunction()

# A broken worker: the case fails with `message`, the worker's stderr line is
# printed under the failure and kept in the report.
function(expect_clean_failure message stderr_line)
  expect_rc(1)
  expect("the failure" "FAILED +metadata/matchesReference[^\n]*\n +FAILED: 1 crash or hang; no wrong answer on ordinary inputs" "${out}")
  expect("its cluster and message" "\n +\\[1\\] crash or hang[^\n]*\n +${message}" "${out}")
  expect("its counterexample" "counterexample \\(draw [0-9]+, [0-9]+ shrinks\\): [^\n]*\\.case\\.json" "${out}")
  expect("the worker's stderr, printed" "stderr ended with:\n( +\\|[^\n]*\n)* +\\| ${stderr_line}" "${out}")
  file(READ ${WORK_DIR}/report/conformance.json report)
  expect("the worker's stderr, in the report" "\"backend_log\": \"[^\"]*${stderr_line}" "${report}")
endfunction()

# The worker starts counted by tests/workers/counted_worker.py: `starts`, the
# number of pids it logged, must equal the summary's `worker starts: N` and the
# report's worker_starts.total; `restarts`, the summary's count of restarts.
function(expect_worker_starts)
  file(STRINGS ${WORK_DIR}/starts.txt pids)
  list(LENGTH pids logged)
  string(REGEX MATCH "\nworker starts: ([0-9]+)( \\(([0-9]+) restarts? after a crash, a hang or a protocol error\\))? \\(exec:[^\n]*counted_worker" line "${out}")
  if(NOT line)
    message(FATAL_ERROR "${CASE}: no `worker starts: N (exec:...)` line in:\n${out}")
  endif()
  set(total ${CMAKE_MATCH_1})
  set(restarts 0)
  if(CMAKE_MATCH_3)
    set(restarts ${CMAKE_MATCH_3})
  endif()
  if(NOT total EQUAL logged)
    message(FATAL_ERROR "${CASE}: the summary says ${total} worker starts, the worker logged ${logged}")
  endif()
  file(READ ${WORK_DIR}/report/conformance.json report)
  expect("the starts, in the report" "\"worker_starts\": {\n +\"total\": ${total},\n +\"restarts\": ${restarts}\n" "${report}")
  set(starts ${total} PARENT_SCOPE)
  set(restarts ${restarts} PARENT_SCOPE)
endfunction()

function(require_torch)
  execute_process(COMMAND ${PYTHON} -c "import torch" RESULT_VARIABLE missing OUTPUT_QUIET ERROR_QUIET)
  if(missing)
    message("SKIP: ${PYTHON} cannot import torch; configure with -DPython3_EXECUTABLE=<a Python that has "
            "torch and numpy> to run the torch K/V buffer examples")
    set(no_torch TRUE PARENT_SCOPE)
  endif()
endfunction()

set(kv_metadata_properties kv_buffer/metadataIsCanonical kv_buffer/metadataDrivesAttentionLikeTheReference
    kv_buffer/earlierDocumentsDoNotInfluence)
set(kv_step_properties kv_buffer/streamingMatchesWholeSequence kv_buffer/inactivePrefixReceivesExactlyZero
    kv_buffer/stepsMatchModel)

set(example "${PYTHON} -m attn_oracle.worker examples")

# A context_parallel case in WORK_DIR/NAME.case.json: two rows of 16 tokens
# (row 0 a document of 8, one of 4 and 4 of padding; row 1 8 of padding and a
# document of 8 from position 3) whose head_tail spans split for cp 2 and 4,
# heads 2*cp / cp, backward. CP is the case's "cp" object.
function(write_cp_case name mask cp heads_q heads_kv)
  set(ids "[[1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]]")
  set(pos "[[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 3, 4, 5, 6, 7, 8, 9, 10]]")
  set(side "{\"segment_ids\": ${ids}, \"segment_pos\": ${pos}}")
  file(WRITE ${WORK_DIR}/${name}.case.json
       "{\"schema\": \"attn-oracle.case/2\", \"op\": \"context_parallel\", \"mask\": \"${mask}\", "
       "\"window\": [-1, -1], \"max_segments\": 2, \"heads_q\": ${heads_q}, \"heads_kv\": ${heads_kv}, "
       "\"head_dim\": 4, \"dtype\": \"fp32\", \"backward\": true, \"q\": ${side}, \"kv\": ${side}, "
       "\"data\": {\"seed\": 3}, \"cp\": ${cp}}\n")
endfunction()

# `replay --backend exec:WORKER CASE`: exit `want` and `pattern` in its output.
function(expect_replay worker case want pattern)
  run(replay --backend "exec:${worker}" ${WORK_DIR}/${case}.case.json)
  expect_rc(${want})
  expect("${case} replayed" "${pattern}" "${out}${err}")
endfunction()
if(CASE STREQUAL "numpy_backend_passes")
  foreach(property metadata/matchesReference attention/matchesReference)
    check_worker("${example}.numpy_backend:Backend" ${property} 40)
    expect_rc(0)
    expect("the hello" "numpy-example 1 \\(attn-oracle-worker/1\\)\\): metadata attention" "${out}")
    expect("a pass" "passed +${property} on exec:[^\n]*\\(([1-9][0-9]*) passed, [0-9]+ declined, 0 failed" "${out}")
  endforeach()
elseif(CASE MATCHES "^(jax|torch)_backend_passes$")
  set(framework ${CMAKE_MATCH_1})
  execute_process(COMMAND ${PYTHON} -c "import ${framework}" RESULT_VARIABLE missing OUTPUT_QUIET ERROR_QUIET)
  if(missing)
    message("SKIP: ${PYTHON} cannot import ${framework}; configure with -DPython3_EXECUTABLE=<a Python that has "
            "${framework} and numpy> to run examples/${framework}_backend.py")
    return()
  endif()
  # A draw costs 1-4 s here (a jit compile per new shape; torch's dispatch).
  set(RUN_TIMEOUT 600)
  check_worker("${example}.${framework}_backend:Backend" attention/ 5)
  expect_rc(0)
  expect("the hello" "${framework}-example [^ ]+ \\(attn-oracle-worker/1\\)\\): attention\n" "${out}")
  expect("a pass" "passed +attention/matchesReference on exec:[^\n]*\\(([1-9][0-9]*) passed" "${out}")
  if(framework STREQUAL "torch")  # SDPA returns no lse, and the backend says so
    expect("lse not compared" "matchesReference[^\n]*\n +note: lse not compared \\(the backend does not produce it\\)" "${out}")
  endif()
elseif(CASE STREQUAL "planted_fails_and_replays")
  check_worker("${example}.planted_numpy_backend:Backend" metadata/matchesReference 100)
  expect_rc(1)
  # The first cluster shown in full: its heading, then its first mismatch.
  string(REGEX MATCH "FAILED +metadata/matchesReference[^\n]*\n +\[1\] wrong answer on ordinary inputs[^\n]*\n +([^\n]*)\n" _ "${out}")
  set(message "${CMAKE_MATCH_1}")
  expect("a shrunk case" "counterexample \\(draw [0-9]+, [1-9][0-9]* shrinks\\)" "${out}")
  # The case in a line under its path (its JSON stays in the file), and the repro line.
  expect("a bottom-right case" "\\.case\\.json\n +metadata (padding_)?causal_bottom_right M=" "${out}")
  expect("a repro line" "\n +repro: attn-oracle repro --backend 'exec:" "${out}")
  string(REGEX MATCH "\n +replay: attn-oracle ([^\n]*)\n" _ "${out}")
  set(replay "${CMAKE_MATCH_1}")
  # Small: at most 4 tokens a side, one row, one document.
  string(REGEX MATCH "counterexample [^\n]*: ([^\n]*\\.case\\.json)" _ "${out}")
  file(READ "${CMAKE_MATCH_1}" case_text)
  expect("one short row" "\"segment_ids\": \\[\n +\\[1(, 1)?(, 1)?(, 1)?\\]\n +\\]" "${case_text}")
  execute_process(COMMAND sh -c "\"${CLI}\" ${replay}" WORKING_DIRECTORY ${SOURCE_DIR} TIMEOUT 60
                  OUTPUT_VARIABLE replayed RESULT_VARIABLE rc)
  expect_rc(3)
  string(REPLACE "[" "\\[" quoted "${message}")
  string(REPLACE "]" "\\]" quoted "${quoted}")
  expect("the same failure on replay" "FAIL\n[^\n]*\n +metadata/matchesReference: ${quoted}" "${replayed}")
elseif(CASE STREQUAL "crashing_worker")
  check_worker("${PYTHON} tests/workers/crashing_worker.py" metadata/matchesReference 20)
  expect_clean_failure("the worker ended while answering metadata: (SIGABRT|exit status 134)"
                       "crashing_worker: aborting on 4 q tokens")
elseif(CASE STREQUAL "hanging_worker")
  set(ENV{ATTN_ORACLE_WORKER_TIMEOUT} 1)
  string(TIMESTAMP start "%s")
  check_worker("${PYTHON} tests/workers/hanging_worker.py" metadata/matchesReference 100)
  string(TIMESTAMP end "%s")
  expect_clean_failure("the worker answered nothing to metadata within 1 s" "hanging_worker: sleeping instead of answering")
  math(EXPR seconds "${end} - ${start}")
  if(seconds GREATER 30)
    message(FATAL_ERROR "${CASE}: a 1 s hang took ${seconds} s to report: the time limit must bound the shrink")
  endif()
elseif(CASE STREQUAL "garbage_worker")
  check_worker("${PYTHON} tests/workers/garbage_worker.py" metadata/matchesReference 20)
  expect_clean_failure("the worker broke the protocol answering metadata: expected a frame starting with \"AOW1\", got \"Hello from a pri\""
                       "garbage_worker: writing garbage")
elseif(CASE STREQUAL "one_worker_per_run")
  file(MAKE_DIRECTORY ${WORK_DIR})
  set(ENV{ATTN_ORACLE_TEST_STARTS} ${WORK_DIR}/starts.txt)
  run(check --backend "exec:${PYTHON} tests/workers/counted_worker.py examples.numpy_backend:Backend" --cases 3
      --no-store --report ${WORK_DIR}/report)
  expect_rc(0)
  expect("every property, run" "[0-9]+ passed, 0 failed, [0-9]+ skipped" "${out}")
  string(REGEX MATCHALL "\n  passed +[^ ]+ on exec:" passes "${out}")
  list(LENGTH passes passed)
  if(passed LESS 10)
    message(FATAL_ERROR "${CASE}: only ${passed} properties passed:\n${out}")
  endif()
  expect_worker_starts()
  if(NOT starts EQUAL 1 OR NOT restarts EQUAL 0)
    message(FATAL_ERROR "${CASE}: ${passed} properties took ${starts} worker starts (${restarts} restarts), not 1:\n${out}")
  endif()
elseif(CASE STREQUAL "restarts_after_crash")
  file(MAKE_DIRECTORY ${WORK_DIR})
  set(ENV{ATTN_ORACLE_TEST_STARTS} ${WORK_DIR}/starts.txt)
  set(worker "${PYTHON} tests/workers/counted_worker.py crashing_worker:Backend")
  run(check --backend "exec:${worker}" --filter metadata/matchesReference,metadata/rowsAreIndependent --cases 20
      --no-store --report ${WORK_DIR}/report)
  expect_rc(1)
  expect("the crash, a failure of the case" "FAILED +metadata/matchesReference[^\n]*\n +FAILED: 1 crash or hang" "${out}")
  expect("its shrunk counterexample" "counterexample \\(draw [0-9]+, [0-9]+ shrinks\\): [^\n]*\\.case\\.json" "${out}")
  expect("the run goes on" "\n  [^ ]+ +metadata/rowsAreIndependent on exec:[^\n]*draws" "${out}")
  expect_worker_starts()
  math(EXPR replaced "${starts} - 1")
  if(starts LESS 2 OR NOT restarts EQUAL replaced)
    message(FATAL_ERROR "${CASE}: ${starts} worker starts, ${restarts} restarts: expected a restart after each crash:\n${out}")
  endif()
elseif(CASE STREQUAL "wrong_protocol_version")
  check_worker("${PYTHON} tests/workers/wrong_protocol_worker.py" metadata/matchesReference 10)
  expect_rc(1)
  expect("a clear error" "the worker speaks protocol attn-oracle-worker/0; this build speaks attn-oracle-worker/1" "${err}")
elseif(CASE STREQUAL "domain_travels")
  check_worker("${example}.self_attention_backend:Backend" metadata/matchesReference 30)
  expect_rc(0)
  expect("the domain, from the hello" "\n    domain: self-attention only, no padding, positions from 0, no extra dims, masks causal and no_mask, no windows\n" "${out}")
  expect("every draw judged" "passed +metadata/matchesReference on exec:[^\n]*\\(30 passed, 0 declined, 0 failed of 30 draws: 30 judged" "${out}")
  file(READ ${WORK_DIR}/report/conformance.json report)
  expect("the domain, in the report" "\"domain\": \"self-attention only, no padding" "${report}")
elseif(CASE STREQUAL "bad_domain")
  check_worker("${PYTHON} tests/workers/bad_domain_worker.py" metadata/matchesReference 10)
  expect_rc(1)
  expect("a clear error" "the worker's hello has a bad domain: domain.mask_kinds is \\[\"causal\",\"sideways\"\\]: a list of mask kinds" "${err}")
elseif(CASE STREQUAL "kv_buffer_metadata_only")
  check_worker("${example}.numpy_kv_buffer_metadata_backend:Backend" kv_buffer 100)
  expect_rc(0)
  expect("the hello" "numpy-kv-buffer-metadata-example 1 \\(attn-oracle-worker/1\\)\\): kv_buffer" "${out}")
  expect("the tally" "\n3 passed, 0 failed, 3 skipped" "${out}")
  foreach(property ${kv_metadata_properties})
    expect("a pass" "passed +${property} on exec:[^\n]*\\(100 passed, 0 declined, 0 failed" "${out}")
  endforeach()
  foreach(property ${kv_step_properties})
    expect("a skip naming the steps" "skipped +${property} on exec:[^\n]*\n +backend [^\n]* serves kv_buffer without the steps? [a-z_ ]+, which this property calls" "${out}")
  endforeach()
elseif(CASE STREQUAL "kv_buffer_planted_metadata_only")
  check_worker("${PYTHON} tests/workers/planted_kv_metadata_worker.py" kv_buffer 100)
  expect_rc(1)
  expect("the tally" "\n0 passed, 3 failed, 3 skipped" "${out}")
  foreach(property ${kv_metadata_properties})
    expect("a failure" "FAILED +${property} on exec:" "${out}")
  endforeach()
  expect("the suite's kernel attends" "micro-sequence [0-9]+ \\(first_document_begin [0-9]+, attended by the suite's float64 varlen kernel" "${out}")
elseif(CASE STREQUAL "kv_steps_without_metadata")
  check_worker("${PYTHON} tests/workers/kv_steps_without_metadata_worker.py" kv_buffer 10)
  expect_rc(1)
  expect("the missing method, named" "Backend serves kv_write_slice, kv_attend but not kv_micro_sequence\\(problem, i\\)" "${out}${err}")
elseif(CASE STREQUAL "torch_kv_buffer_passes")
  require_torch()
  if(no_torch)
    return()
  endif()
  set(RUN_TIMEOUT 600)
  check_worker("${example}.torch_kv_buffer_backend:Backend" kv_buffer 100)
  expect_rc(0)
  expect("the tally" "\n6 passed, 0 failed, 0 skipped" "${out}")
elseif(CASE STREQUAL "torch_kv_buffer_planted_fails_and_replays")
  require_torch()
  if(no_torch)
    return()
  endif()
  set(RUN_TIMEOUT 600)
  check_worker("${example}.planted_torch_kv_buffer_backend:Backend" kv_buffer 100)
  expect_rc(1)
  expect("the tally" "\n3 passed, 3 failed, 0 skipped" "${out}")
  foreach(property ${kv_metadata_properties})
    string(REGEX MATCH "FAILED +${property} on exec:[^\n]*\n +\\[1\\] [^\n]*\n +([^\n]*)\n" _ "${out}")
    set(message "${CMAKE_MATCH_1}")
    if(NOT message)
      message(FATAL_ERROR "${CASE}: ${property} did not fail:\n${out}")
    endif()
    string(REGEX MATCH "\n +replay: attn-oracle ([^\n]*/${property}/[^\n]*\\.case\\.json)\n" _ "${out}")
    set(replay "${CMAKE_MATCH_1}")
    string(REGEX MATCH "counterexample [^\n]*: ([^\n]*/${property}/[^\n]*\\.case\\.json)\n" _ "${out}")
    file(READ "${CMAKE_MATCH_1}" case_text)
    expect("two one-token documents" "\"doc_lengths\": \\[1, 1\\],\n +\"micro_seq_tokens\": 1," "${case_text}")
    execute_process(COMMAND sh -c "\"${CLI}\" ${replay}" WORKING_DIRECTORY ${SOURCE_DIR} TIMEOUT 120
                    OUTPUT_VARIABLE replayed RESULT_VARIABLE rc)
    expect_rc(3)
    string(REPLACE "[" "\\[" quoted "${message}")
    string(REPLACE "]" "\\]" quoted "${quoted}")
    string(REPLACE "(" "\\(" quoted "${quoted}")
    string(REPLACE ")" "\\)" quoted "${quoted}")
    expect("the same failure on replay" "FAIL\n[^\n]*\n +${property}: ${quoted}" "${replayed}")
  endforeach()
elseif(CASE STREQUAL "context_parallel_example_passes")
  check_worker("${example}.numpy_context_parallel_backend:Backend" context_parallel/ 50)
  expect_rc(0)
  expect("the hello" "numpy-context-parallel-example 1 \\(attn-oracle-worker/1\\)\\): metadata attention context_parallel\n" "${out}")
  expect("every property, judged" "\n[1-9][0-9]* passed, 0 failed, 0 skipped" "${out}")
  write_cp_case(ring_head_tail padding_causal "{\"size\": 4, \"strategy\": \"ring\", \"balance\": \"head_tail\"}" 8 4)
  write_cp_case(all_gather_dual_chunk_swap padding_causal_bottom_right
                "{\"size\": 2, \"strategy\": \"all_gather\", \"balance\": \"dual_chunk_swap\"}" 4 2)
  write_cp_case(all_to_all_striped padding_causal
                "{\"size\": 2, \"strategy\": \"all_to_all\", \"balance\": \"striped\", \"stripe\": 2}" 4 2)
  write_cp_case(ring_explicit_indices padding "{\"size\": 2, \"strategy\": \"ring\", \"balance\": \"explicit_indices\", \"indices\": [[0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15], [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]]}" 4 2)
  foreach(case ring_head_tail all_gather_dual_chunk_swap all_to_all_striped ring_explicit_indices)
    run(eval --backend reference ${WORK_DIR}/${case}.case.json)
    expect_rc(0)
    set(reference "${out}")
    run(eval --backend "exec:${example}.numpy_context_parallel_backend:Backend" ${WORK_DIR}/${case}.case.json)
    expect_rc(0)
    foreach(key permutation ranks)
      string(JSON want GET "${reference}" ${key})
      string(JSON got GET "${out}" ${key})
      if(NOT got STREQUAL want)
        message(FATAL_ERROR "${CASE}: ${case}: the example's ${key} is\n${got}\nthe reference's\n${want}")
      endif()
    endforeach()
    expect_replay("${example}.numpy_context_parallel_backend:Backend" ${case} 0 "^PASS\n")
  endforeach()
elseif(CASE STREQUAL "context_parallel_planted_fails")
  file(MAKE_DIRECTORY ${WORK_DIR})
  write_cp_case(ring_4 padding_causal "{\"size\": 4, \"strategy\": \"ring\", \"balance\": \"contiguous\"}" 8 4)
  write_cp_case(ring_2 padding_causal "{\"size\": 2, \"strategy\": \"ring\", \"balance\": \"contiguous\"}" 4 2)
  set(planted "${example}.planted_numpy_context_parallel_backend:Backend")
  check_worker("${planted}" context_parallel/ 100)
  expect_rc(1)
  foreach(property rankMetadataMatchesTheOracle ringStepsMergeToTheReference)
    expect("a step failure" "FAILED +context_parallel/${property} on exec:[^\n]*\n +\\[1\\] wrong answer on ordinary inputs[^\n]*\n +rank [0-9]+, step [1-9]" "${out}")
  endforeach()
  expect("the merged run, right" "passed +context_parallel/runMatchesTheUnshardedReference on exec:" "${out}")
  # Rank 1 at step 1 meets rank 2's keys (tokens 8..11: document 2 of row 0) instead of rank 0's (tokens 0..3:
  # the first half of document 1, which its queries attend).
  expect_replay("${planted}" ring_4 3 "^FAIL\n[^\n]*\n +[^\n]*rank 1, step 1: [^\n]*")
  expect_replay("${planted}" ring_2 0 "^PASS\n")
elseif(CASE STREQUAL "context_parallel_broken_permutation")
  file(MAKE_DIRECTORY ${WORK_DIR})
  write_cp_case(ring padding_causal "{\"size\": 2, \"strategy\": \"ring\", \"balance\": \"dual_chunk_swap\"}" 4 2)
  set(case ${WORK_DIR}/ring.case.json)
  set(worker "${PYTHON} tests/workers/cp_worker.py")
  set(malformed "the backend failed: the worker's reply to cp_permutation is malformed: ")
  foreach(verb eval replay)
    run(${verb} --backend "exec:${worker} FlatPermutation" ${case})
    expect_rc(1)
    expect("the shape, named" "${malformed}permutation must be \\[B, T\\] = \\[2, 16\\], the shape of the segment ids; the reply's has shape \\[32\\]" "${err}")
    run(${verb} --backend "exec:${worker} FloatPermutation" ${case})
    expect_rc(1)
    expect("the dtype, named" "${malformed}array permutation holds f64, not integers" "${err}")
  endforeach()
  run(eval --backend "exec:${worker} NotAPermutation" ${case})
  expect_rc(2)
  expect("the slot, named" "\"code\": ?\"bad_metadata\", ?\"message\": ?\"the backend's permutation: row 0, slot 1: token 0 is listed already at slot 0\"" "${out}")
  run(replay --backend "exec:${worker} NotAPermutation" ${case})
  expect_rc(3)
  expect("the slot, named" "permutation: row 0, rank 0, local slot 1: backend token 0, the layout's 1" "${out}")
  expect("no run un-permuted" "the run cannot be put back in row order: row 0, slot 1: token 0 is listed already at slot 0" "${out}")
else()
  message(FATAL_ERROR "unknown CASE ${CASE}")
endif()
