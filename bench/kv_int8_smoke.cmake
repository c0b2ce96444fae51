# ctest bench.kv_int8_smoke: runs kv_int8_bench on a golden model with seeded random ids and checks
# what it reports: a real but bounded accuracy cost, and the GLM-5.2 memory figures worked out by
# hand from docs/models.md, "Notation and configuration", "IndexShare" (78 layers of r_kv 512 + d_r 64, d_I 128 on the 21 full layers):
#   f32  78·(512 + 64)·4 + 21·128·4 = 190464 bytes/token
#   bf16 (78·(512 + 64) + 21·128)·2 =  95232
#   int8 78·(512 + 4 + 64·4) + 21·128·4 = 70968
#   cmake -DBENCH=... -DMODEL=... -DGLM52=... -DOUT=... -P kv_int8_smoke.cmake
file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${BENCH}" --model "${MODEL}" --random-tokens 3000 --windows 2 --context 40 --eval-tokens 12
          --new-tokens 8 --memory-configs "${GLM52}" --json "${OUT}/kv.json" --threads 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE table)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kv_int8_bench exited with ${rc}")
endif()
file(READ "${OUT}/kv.json" text)
string(JSON rows GET "${text}" teacher_forced rows)
string(JSON kl GET "${text}" teacher_forced mean_kl_nats)
string(JSON agreement GET "${text}" teacher_forced argmax_agreement)
if(NOT rows EQUAL 24)
  message(FATAL_ERROR "expected 2 windows x 12 teacher-forced rows, got ${rows}")
endif()
if(NOT kl GREATER 0 OR NOT kl LESS 1)
  message(FATAL_ERROR "mean KL ${kl}: the int8 cache must change the logits (> 0), but boundedly (< 1 nat)")
endif()
if(agreement GREATER 1 OR NOT agreement GREATER 0.5)
  message(FATAL_ERROR "greedy agreement ${agreement} outside (0.5, 1]")
endif()
string(JSON source GET "${text}" memory 1 source)
string(JSON f32 GET "${text}" memory 1 bytes_per_token f32)
string(JSON bf16 GET "${text}" memory 1 bytes_per_token bf16)
string(JSON int8 GET "${text}" memory 1 bytes_per_token int8)
if(NOT f32 EQUAL 190464 OR NOT bf16 EQUAL 95232 OR NOT int8 EQUAL 70968)
  message(FATAL_ERROR "${source}: bytes/token f32 ${f32}, bf16 ${bf16}, int8 ${int8}; expected 190464, 95232, 70968")
endif()
if(NOT table MATCHES "mean KL")
  message(FATAL_ERROR "no summary table printed: ${table}")
endif()
# A context beyond the model's limit is rejected with a clear error.
execute_process(
  COMMAND "${BENCH}" --model "${MODEL}" --random-tokens 3000 --context 100000 --json "${OUT}/bad.json" --threads 1
  RESULT_VARIABLE bad_rc ERROR_VARIABLE bad_err)
if(bad_rc EQUAL 0 OR NOT bad_err MATCHES "max_position_embeddings")
  message(FATAL_ERROR "a context beyond the limit was not rejected: rc=${bad_rc} ${bad_err}")
endif()
message(STATUS "kv_int8_smoke: mean KL ${kl}, greedy agreement ${agreement}")
