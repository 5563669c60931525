#pragma once
// The ONE place that knows how the installed CCCL spells its memory-resource concepts.
//
// CCCL 3.0.x (CUDA 13.0) keeps <cuda/memory_resource> behind
// LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE and asks of a resource:
//   resource:        void* allocate(size_t bytes, size_t align); void deallocate(void*, size_t, size_t);
//                    and operator==
//   async_resource:  void* allocate_async(size_t, size_t, cuda::stream_ref);
//                    void deallocate_async(void*, size_t, size_t, cuda::stream_ref)
//   properties:      a friend `get_property(const R&, Property)` found by ADL.
// CCCL 3.1+ renamed the members: synchronous ones became allocate_sync/deallocate_sync and the
// stream-ordered ones took the names allocate/deallocate with the stream first.
//
// gpumem resources write their own spelling once — allocate(bytes, align, gpumem::stream_ref) and
// a noexcept deallocate(p, bytes, align, gpumem::stream_ref), which is also CCCL 3.0's synchronous
// spelling thanks to the defaulted stream — and add GPUMEM_CCCL_MEMBERS(T) for the rest.
#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <cuda/memory_resource>
#include <cuda/std/version>
#include <cuda/stream_ref>

#include <cstddef>
#include <cstdint>

#include "gpumem/core.hpp"

namespace gpumem::cccl {

using ::cuda::mr::device_accessible;
using ::cuda::mr::host_accessible;

template <class R, class... Properties>
concept async_resource_with = ::cuda::mr::async_resource_with<R, Properties...>;
template <class R, class... Properties>
concept resource_with = ::cuda::mr::resource_with<R, Properties...>;

// A CCCL stream as gpumem's opaque stream identity (the cudaStream_t's value; 0 = default), and back.
inline gpumem::stream_ref to_stream_ref(::cuda::stream_ref s) noexcept { return gpumem::stream_ref{s.get()}; }
inline ::cuda::stream_ref to_cuda_stream_ref(gpumem::stream_ref s) noexcept {
  return ::cuda::stream_ref{s.get()};
}

}  // namespace gpumem::cccl

#if CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION == 0
// CCCL 3.0.x: the synchronous members are gpumem's own; add the *_async pair.
#define GPUMEM_CCCL_MEMBERS(T)                                                                 \
  void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref s) {      \
    return allocate(bytes, alignment, ::gpumem::cccl::to_stream_ref(s));                       \
  }                                                                                            \
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment,                     \
                        ::cuda::stream_ref s) noexcept {                                       \
    deallocate(p, bytes, alignment, ::gpumem::cccl::to_stream_ref(s));                         \
  }
#elif CCCL_MAJOR_VERSION >= 3
// CCCL 3.1+: synchronous members are *_sync; stream-ordered ones are allocate/deallocate with the
// stream first, which overload cleanly against gpumem's (bytes, alignment, stream_ref) spelling.
#define GPUMEM_CCCL_MEMBERS(T)                                                                 \
  void* allocate_sync(std::size_t bytes, std::size_t alignment = ::gpumem::default_alignment) {\
    return allocate(bytes, alignment, ::gpumem::stream_ref{0});                                \
  }                                                                                            \
  void deallocate_sync(void* p, std::size_t bytes,                                             \
                       std::size_t alignment = ::gpumem::default_alignment) noexcept {         \
    deallocate(p, bytes, alignment, ::gpumem::stream_ref{0});                                  \
  }                                                                                            \
  void* allocate(::cuda::stream_ref s, std::size_t bytes, std::size_t alignment) {             \
    return allocate(bytes, alignment, ::gpumem::cccl::to_stream_ref(s));                       \
  }                                                                                            \
  void deallocate(::cuda::stream_ref s, void* p, std::size_t bytes,                            \
                  std::size_t alignment) noexcept {                                            \
    deallocate(p, bytes, alignment, ::gpumem::cccl::to_stream_ref(s));                         \
  }
#else
#error "gpumem needs CCCL 3.0 or newer (CUDA 13)"
#endif

// Declares that memory from T is reachable by the device / the host.
#define GPUMEM_CCCL_DEVICE_ACCESSIBLE(T) \
  friend void get_property(const T&, ::cuda::mr::device_accessible) noexcept {}
#define GPUMEM_CCCL_HOST_ACCESSIBLE(T) \
  friend void get_property(const T&, ::cuda::mr::host_accessible) noexcept {}
