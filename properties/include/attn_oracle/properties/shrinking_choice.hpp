// shrinking_choice.hpp: choices between generators and values that shrink
// towards the first one. RapidCheck's gen::element, gen::elementOf and
// gen::weightedOneOf never shrink their choice, so a counterexample would keep
// whatever layout it was drawn with (extra dims, padding, a position mode); these
// draw an index into the (cumulative) weights, size-independently, and shrink it
// towards 0: put the simplest alternative first.
#pragma once

#include <utility>
#include <vector>

#include <rapidcheck.h>

namespace attn_oracle::inline properties {

// One of `values`, equally likely, shrinking towards values[0].
template <typename T>
rc::Gen<T> shrinking_element(std::vector<T> values) {
  return rc::gen::map(rc::gen::resize(100, rc::gen::inRange<size_t>(0, values.size())),
                      [values](size_t i) { return values[i]; });
}

// One of the generators with the given weights, shrinking towards the first.
template <typename T>
rc::Gen<T> shrinking_weighted(std::vector<std::pair<int, rc::Gen<T>>> alternatives) {
  int total = 0;
  for (const auto& a : alternatives) total += a.first;
  return rc::gen::mapcat(rc::gen::resize(100, rc::gen::inRange(0, total)), [alternatives](int x) {
    for (const auto& [w, gen] : alternatives) {
      if (x < w) return gen;
      x -= w;
    }
    return alternatives.back().second;
  });
}

}  // namespace attn_oracle::properties
