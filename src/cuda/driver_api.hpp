#pragma once
// The few driver-API entry points the library uses, resolved once through the runtime's
// cudaGetDriverEntryPointByVersion. The library links only the static runtime: it never links
// libcuda, so binaries start on machines with no driver (CI) and run the simulated device there.
#include <cuda.h>
#include <cudaTypedefs.h>

namespace gpumem::cuda_detail {

struct driver_api {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
  // IPC (ipc_export.cpp, ipc_import.cpp)
  PFN_cuMemExportToShareableHandle_v10020 mem_export_to_shareable_handle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 mem_import_from_shareable_handle = nullptr;
  PFN_cuMemRetainAllocationHandle_v11000 mem_retain_allocation_handle = nullptr;
  PFN_cuMemGetAddressRange_v3020 mem_get_address_range = nullptr;
};

// Resolves every entry point on first use (thread-safe). Throws gpumem::cuda_error naming the
// symbol that could not be found. Initialises the runtime (and so the primary context) first.
const driver_api& driver();

// The same table when it resolved, nullptr otherwise; never throws. For error-name lookups.
const driver_api* driver_if_available() noexcept;

}  // namespace gpumem::cuda_detail
