// Sets an environment variable for one scope and puts back what was there (the CUDA tests switch auto's kernel
// family with FLASHTILE_CUDA_FORWARD and FLASHTILE_CUDA_BACKWARD_KERNELS). Header-only: scripts/device_prepare.sh
// builds the GPU test binaries without the test support library.
#pragma once

#include <cstdlib>
#include <string>

namespace flashtile {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    set(value);
  }
  ~ScopedEnv() { had_ ? set(old_.c_str()) : set(nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) { value ? setenv(name_, value, 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace flashtile
