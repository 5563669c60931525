#pragma once
// The resource concept every gpumem memory resource satisfies.
//
// Contract of the stream argument: `allocate(bytes, alignment, s)` returns memory that work
// enqueued on `s` after the call may use at once; work on other streams must be ordered after `s`
// (or the caller must call `record_use`). `deallocate(p, bytes, alignment, s)` means: after the
// work already enqueued on `s`, `p` is no longer used. It is noexcept; misuse it detects goes to the
// misuse handler (errors.hpp).
#include <concepts>
#include <cstddef>

#include "gpumem/core.hpp"

namespace gpumem {

template <class R>
concept resource = requires(R& r, void* p, std::size_t bytes, std::size_t alignment, stream_ref s) {
  { r.allocate(bytes, alignment, s) } -> std::same_as<void*>;
  { r.deallocate(p, bytes, alignment, s) } noexcept;
};

}  // namespace gpumem
