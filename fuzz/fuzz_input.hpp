// fuzz_input.hpp: turns the fuzzer's bytes into small structured values.
//
// A deliberately tiny reader (not clang's FuzzedDataProvider) so that the corpus
// replay test builds with g++ on machines without clang. Reads past the end give
// 0, so every byte string decodes to some input and short inputs stay small.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attn_oracle::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Uniform-ish in [lo, hi] (hi - lo < 256).
  int64_t in_range(int64_t lo, int64_t hi) { return lo + byte() % (hi - lo + 1); }
  bool flag() { return byte() & 1; }
  bool exhausted() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace attn_oracle::fuzz
