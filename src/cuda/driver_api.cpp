#include "driver_api.hpp"

#include <cuda_runtime_api.h>
#include <fmt/core.h>

#include <exception>
#include <mutex>

#include "cuda_check.hpp"
#include "gpumem/errors.hpp"

namespace gpumem::cuda_detail {

namespace {

// The ABI version we ask for: the 12.0 spelling of each entry point, which every CUDA 12/13
// driver provides. Asking by version keeps us off a newer signature by accident.
constexpr unsigned int entry_point_version = 12000;

template <class Fn>
void resolve(const char* symbol, Fn& out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t rc =
      cudaGetDriverEntryPointByVersion(symbol, &fn, entry_point_version, cudaEnableDefault, &found);
  if (rc != cudaSuccess) throw_runtime_error("cudaGetDriverEntryPointByVersion", rc, __FILE__, __LINE__);
  if (found != cudaDriverEntryPointSuccess || fn == nullptr)
    throw cuda_error("cudaGetDriverEntryPointByVersion", static_cast<int>(found),
                     "cudaDriverEntryPointSymbolNotFound",
                     fmt::format("driver entry point {} not found (driver too old for version {}?)",
                                 symbol, entry_point_version));
  out = reinterpret_cast<Fn>(fn);
}

driver_api load() {
  // Entry points are only handed out once the runtime has a driver; this call also creates the
  // primary context the driver calls below act on.
  GPUMEM_CUDA_CHECK(cudaFree(nullptr));
  driver_api d;
  resolve("cuGetErrorName", d.get_error_name);
  resolve("cuDeviceGet", d.device_get);
  resolve("cuDeviceGetAttribute", d.device_get_attribute);
  resolve("cuMemGetAllocationGranularity", d.mem_get_allocation_granularity);
  resolve("cuMemAddressReserve", d.mem_address_reserve);
  resolve("cuMemAddressFree", d.mem_address_free);
  resolve("cuMemCreate", d.mem_create);
  resolve("cuMemRelease", d.mem_release);
  resolve("cuMemMap", d.mem_map);
  resolve("cuMemUnmap", d.mem_unmap);
  resolve("cuMemSetAccess", d.mem_set_access);
  resolve("cuMemExportToShareableHandle", d.mem_export_to_shareable_handle);
  resolve("cuMemImportFromShareableHandle", d.mem_import_from_shareable_handle);
  resolve("cuMemRetainAllocationHandle", d.mem_retain_allocation_handle);
  resolve("cuMemGetAddressRange", d.mem_get_address_range);
  return d;
}

std::once_flag once;
driver_api table;
bool loaded = false;
std::exception_ptr load_error;

void load_once() {
  std::call_once(once, [] {
    try {
      table = load();
      loaded = true;
    } catch (...) {
      load_error = std::current_exception();
    }
  });
}

}  // namespace

const driver_api& driver() {
  load_once();
  if (!loaded) std::rethrow_exception(load_error);
  return table;
}

const driver_api* driver_if_available() noexcept {
  load_once();
  return loaded ? &table : nullptr;
}

}  // namespace gpumem::cuda_detail
