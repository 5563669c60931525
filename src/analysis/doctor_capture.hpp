#pragma once
// The capture-frees-graph-memory finding (documented in include/gpumem/doctor.hpp).
#include "gpumem/doctor.hpp"

namespace gpumem::detail {

void capture_frees(const trace& t, doctor_report& out);

}  // namespace gpumem::detail
