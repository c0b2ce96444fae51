# ctest bench.accept_smoke: runs accept_bench --quick on a tiny model with seeded random ids and
# checks that it exits 0 and writes JSON with the keys the report reads.
#   cmake -DBENCH=... -DMODEL=... -DOUT=... -P accept_smoke.cmake
file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${BENCH}" --quick --model "${MODEL}" --random-tokens 4000 --contexts 6,24 --k 1,2
          --json "${OUT}/accept.json" --csv "${OUT}/accept.csv" --threads 1
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "accept_bench exited with ${rc}")
endif()
file(READ "${OUT}/accept.json" text)
foreach(key benchmark run model settings ci_method cells elapsed_seconds)
  string(JSON value ERROR_VARIABLE err GET "${text}" ${key})
  if(err)
    message(FATAL_ERROR "accept.json lacks \"${key}\": ${err}")
  endif()
endforeach()
string(JSON cells LENGTH "${text}" cells)
if(cells LESS 4)
  message(FATAL_ERROR "accept.json has ${cells} cells, expected at least 4")
endif()
foreach(key context regime k variant rule temperature corpus windows cycles unconditional conditional
            mean_acceptance_length)
  string(JSON value ERROR_VARIABLE err GET "${text}" cells 0 ${key})
  if(err)
    message(FATAL_ERROR "accept.json cells[0] lacks \"${key}\": ${err}")
  endif()
endforeach()
string(JSON mean GET "${text}" cells 0 mean_acceptance_length mean)
if(mean LESS 1)
  message(FATAL_ERROR "mean acceptance length ${mean} < 1")
endif()
# A context beyond the model's limit is rejected with a clear error.
execute_process(
  COMMAND "${BENCH}" --quick --model "${MODEL}" --random-tokens 4000 --contexts 4096
          --json "${OUT}/bad.json" --csv "${OUT}/bad.csv" --threads 1
  RESULT_VARIABLE bad_rc ERROR_VARIABLE bad_err)
if(bad_rc EQUAL 0 OR NOT bad_err MATCHES "max_position_embeddings")
  message(FATAL_ERROR "a context beyond the limit was not rejected: rc=${bad_rc} ${bad_err}")
endif()
message(STATUS "accept_smoke: ${cells} cells, first mean acceptance length ${mean}")
