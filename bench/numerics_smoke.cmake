# ctest bench.numerics_smoke: runs numerics_bench on a golden model with seeded random ids and checks
# what it reports (for the int8 latent, then for bf16 indexer keys): a real but bounded accuracy cost, and the GLM-5.2 memory figures worked out by
# hand from docs/models.md, "Notation and configuration", "IndexShare" (78 layers of r_kv 512 + d_r 64, d_I 128 on the 21 full layers):
#   f32  78·(512 + 64)·4 + 21·128·4 = 190464 bytes/token
#   bf16 (78·(512 + 64) + 21·128)·2 =  95232
#   int8 78·(512 + 4 + 64·4) + 21·128·4 = 70968
#   cmake -DBENCH=... -DMODEL=... -DGLM52=... -DOUT=... -P numerics_smoke.cmake
file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${BENCH}" --model "${MODEL}" --random-tokens 3000 --windows 2 --context 40 --eval-tokens 12
          --new-tokens 8 --memory-configs "${GLM52}" --json "${OUT}/kv.json" --threads 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE table)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "numerics_bench exited with ${rc}")
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
# Runs numerics_bench with --variant VARIANT on the same seeded windows, fails unless it exits with 0
# and reports that variant, and sets ${VARIANT_TEXT} (its JSON), ${VARIANT_TABLE} (what it printed),
# ${VARIANT_KL} and ${VARIANT_NLL} (teacher-forced mean KL and held-out loss) in the caller's scope.
function(run_variant variant)
  string(REPLACE "-" "_" key "${variant}")
  execute_process(
    COMMAND "${BENCH}" --model "${MODEL}" --variant ${variant} --random-tokens 3000 --windows 2 --context 40
            --eval-tokens 12 --new-tokens 8 --json "${OUT}/${key}.json" --threads 1
    RESULT_VARIABLE variant_rc OUTPUT_VARIABLE variant_table)
  if(NOT variant_rc EQUAL 0)
    message(FATAL_ERROR "numerics_bench --variant ${variant} exited with ${variant_rc}")
  endif()
  file(READ "${OUT}/${key}.json" variant_text)
  string(JSON reported GET "${variant_text}" variant)
  if(NOT reported STREQUAL "${variant}")
    message(FATAL_ERROR "numerics_bench --variant ${variant} reported variant ${reported}")
  endif()
  string(JSON variant_kl GET "${variant_text}" teacher_forced mean_kl_nats)
  string(JSON variant_nll GET "${variant_text}" teacher_forced mean_nll_${key})
  set(VARIANT_TEXT "${variant_text}" PARENT_SCOPE)
  set(VARIANT_TABLE "${variant_table}" PARENT_SCOPE)
  set(VARIANT_KL "${variant_kl}" PARENT_SCOPE)
  set(VARIANT_NLL "${variant_nll}" PARENT_SCOPE)
endfunction()

# --variant bf16-index-keys and fp8-index-keys: the indexer keys in bf16 or fp8 against f32, with the
# top-k keys the two selections share on each layer with its own indexer (glm_a: layers 0, 1 and 3).
# The first sees the same inputs in both runs, so only the rounding of q and k separates its
# selections: nearly all shared.
foreach(keys bf16 fp8)
  run_variant(${keys}-index-keys)
  string(JSON overlap_layers LENGTH "${VARIANT_TEXT}" selection_overlap)
  string(JSON first_layer GET "${VARIANT_TEXT}" selection_overlap 0 layer)
  string(JSON first_share GET "${VARIANT_TEXT}" selection_overlap 0 shared_fraction)
  string(JSON first_keys GET "${VARIANT_TEXT}" selection_overlap 0 selected_keys)
  if(NOT overlap_layers EQUAL 3 OR NOT first_layer EQUAL 0)
    message(FATAL_ERROR "${keys} keys: ${overlap_layers} layers compared (want 3), first ${first_layer}")
  endif()
  # 24 decode steps, each selecting index_topk = 8 of its 41 or more keys.
  if(NOT first_keys EQUAL 192 OR NOT first_share GREATER 0.8 OR first_share GREATER 1)
    message(FATAL_ERROR "${keys} keys: layer 0 shares ${first_share} of ${first_keys} keys; want 192, share in (0.8, 1]")
  endif()
  if(VARIANT_KL LESS 0 OR NOT VARIANT_KL LESS 5 OR NOT VARIANT_NLL GREATER 0)
    message(FATAL_ERROR "${keys} keys: mean KL ${VARIANT_KL}, held-out loss ${VARIANT_NLL}")
  endif()
  if(NOT VARIANT_TABLE MATCHES "shared with f32's selection")
    message(FATAL_ERROR "no selection table printed: ${VARIANT_TABLE}")
  endif()
  set(share_${keys} ${first_share})
endforeach()
# --variant bf16-activations and fp8-activations: both sides with every matrix in FP8, the input rows
# reduced on one; the logits move (KL above 0) and the held-out loss stays finite.
foreach(acts bf16 fp8)
  run_variant(${acts}-activations)
  if(NOT VARIANT_KL GREATER 0 OR NOT VARIANT_KL LESS 5 OR NOT VARIANT_NLL GREATER 0)
    message(FATAL_ERROR "${acts} activations: mean KL ${VARIANT_KL}, held-out loss ${VARIANT_NLL}")
  endif()
endforeach()
execute_process(
  COMMAND "${BENCH}" --model "${MODEL}" --variant fp4 --random-tokens 3000 --json "${OUT}/bad.json" --threads 1
  RESULT_VARIABLE variant_rc ERROR_VARIABLE variant_err)
if(variant_rc EQUAL 0 OR NOT variant_err MATCHES "--variant")
  message(FATAL_ERROR "a bad --variant was not rejected by name: rc=${variant_rc} ${variant_err}")
endif()
message(STATUS "numerics_smoke: mean KL ${kl}, greedy agreement ${agreement}; layer 0 shares ${share_bf16} (bf16 keys), ${share_fp8} (fp8 keys)")
