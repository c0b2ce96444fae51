// Configure-time check (CMakeLists.txt): does the compiler, with the project's -march, store the
// 4 x int64 constant {1, 1, 0, 0} correctly? GCC 12.2 with AVX-512 enabled emits a broadcast of 1
// to all four lanes from its straight-line (SLP) vectoriser; where that happens the build turns SLP
// vectorisation off. Exit status 0: correct.
#include <cstdint>
#include <cstring>

__attribute__((noinline)) void Store(int64_t* out) {
  const int64_t values[4] = {1, 1, 0, 0};
  std::memcpy(out, values, sizeof values);
}

int main() {
  int64_t out[4];
  Store(out);
  return out[0] == 1 && out[1] == 1 && out[2] == 0 && out[3] == 0 ? 0 : 1;
}
