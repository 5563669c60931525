#pragma once
// The pinned-memory finding (documented in include/gpumem/doctor.hpp): judges the pinned host
// trace in `opts.pinned` against the pinned cap. Adds the finding to `out`, or a `skipped` line
// saying why it was not measured.
#include "gpumem/doctor.hpp"

namespace gpumem::detail {

void pinned_memory(const doctor_options& opts, doctor_report& out);

}  // namespace gpumem::detail
