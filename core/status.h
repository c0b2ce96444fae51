// Error-handling helpers shared by every layer.
//
// Three tiers (see ARCHITECTURE.md):
//   * absl::Status / absl::StatusOr for anything a caller can cause: bad files, bad configs, bad args.
//   * MTPSPEC_CHECK for internal invariants (aborts with file:line); never for user input.
//   * CUDA errors become Status through the backend's own macro.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define MTPSPEC_CONCAT_INNER(a, b) a##b
#define MTPSPEC_CONCAT(a, b) MTPSPEC_CONCAT_INNER(a, b)

// Returns early from the enclosing function if `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status _mtpspec_st = (expr);       \
    if (!_mtpspec_st.ok()) return _mtpspec_st; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` — binds the value or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  MTPSPEC_ASSIGN_OR_RETURN_IMPL(MTPSPEC_CONCAT(_mtpspec_sor_, __LINE__), lhs, expr)
#define MTPSPEC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

// Internal invariant; a failure is a bug in mtpspec, not bad input.
#define MTPSPEC_CHECK(cond)                                                             \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: MTPSPEC_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

#ifdef NDEBUG
#define MTPSPEC_DCHECK(cond) \
  do {                       \
  } while (0)
#else
#define MTPSPEC_DCHECK(cond) MTPSPEC_CHECK(cond)
#endif
