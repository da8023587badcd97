# reference_faults_test.cmake: the oracle users trust holds no planted fault.
#   cmake -DNM=nm "-DLIBRARIES=a.a;b.a" -P reference_faults_test.cmake
# Faults are planted in tests/ only (tests/planted/tile_faults.hpp: the float64
# references built again, in the namespace attn_oracle::planted, with one step of
# the tile arithmetic wrong). Fails when a symbol of a library names the planted
# namespace or a fault: "planted", "Fault", or a word that starts with "fault"
# ("default" is not one), as the fault switch the reference once carried did
# (ScopedTileFault, planted_tile_fault).
set(failures "")
foreach(library ${LIBRARIES})
  execute_process(COMMAND ${NM} -C ${library} OUTPUT_VARIABLE symbols ERROR_VARIABLE errors RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} -C ${library} failed (${rc}): ${errors}")
  endif()
  # One list item per line: brackets and semicolons in names would join items.
  string(REPLACE "[" "(" symbols "${symbols}")
  string(REPLACE "]" ")" symbols "${symbols}")
  string(REPLACE ";" "," symbols "${symbols}")
  string(REPLACE "\n" ";" lines "${symbols}")
  foreach(line IN LISTS lines)
    # Symbol lines only ("address type name"), not the archive's member names.
    if(line MATCHES " [A-Za-z] .*(planted|Fault|[^a-zA-Z]fault)")
      string(SUBSTRING "${line}" 0 240 line)
      list(APPEND failures "${library}: ${line}")
    endif()
  endforeach()
endforeach()
if(failures)
  list(LENGTH failures count)
  list(SUBLIST failures 0 10 shown)
  list(JOIN shown "\n  " text)
  message(FATAL_ERROR "the reference holds planted faults: ${count} symbols, the first:\n  ${text}")
endif()
message(STATUS "no planted fault in ${LIBRARIES}")
